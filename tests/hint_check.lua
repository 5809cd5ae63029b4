-- Runs plugin_scripts/job_submit.lua's parser outside Slurm: one hint per input line,
-- prints "OK <normalised>" or "ERR <field> <problem>" per line.
--   lua5.1 tests/hint_check.lua plugin_scripts/job_submit.lua [hex]
-- With "hex", each input line is the hint's bytes in hexadecimal (so hints may hold
-- newlines, NULs or any other byte).
slurm = { SUCCESS = 0, ERROR = -1, log_user = function() end, log_info = function() end }
dofile(arg[1])
local hex = arg[2] == "hex"
io.stdout:setvbuf("line") -- answers line by line to a process that waits for each
for line in io.lines() do
  if hex then
    line = string.gsub(line, "%x%x", function(h) return string.char(tonumber(h, 16)) end)
  end
  local normalised, field, problem = shockwave_parse_hint(line)
  if normalised then print("OK " .. normalised) else print("ERR " .. field .. " " .. problem) end
end
