-- Runs plugin_scripts/job_submit.lua's hold-mark reader outside Slurm: one comment per
-- input line (hex), prints hex("<comment without mark>\0<mark or ->\0<text marked owner>").
--   lua5.1 tests/mark_check.lua plugin_scripts/job_submit.lua
slurm = { SUCCESS = 0, ERROR = -1, log_user = function() end, log_info = function() end }
dofile(arg[1])
io.stdout:setvbuf("line")
for line in io.lines() do
  local comment = string.gsub(line, "%x%x", function(h) return string.char(tonumber(h, 16)) end)
  local text, mark = shockwave_split_mark(comment)
  local out = text .. "\0" .. (mark or "-") .. "\0" .. shockwave_with_mark(text, "owner")
  print((string.gsub(out, ".", function(ch) return string.format("%02x", string.byte(ch)) end)))
end
