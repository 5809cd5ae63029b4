-- Runs plugin_scripts/job_submit.lua's parser outside Slurm: one hint per input line,
-- prints "OK <normalised>" or "ERR <field> <problem>".
slurm = { SUCCESS = 0, ERROR = -1, log_user = function() end, log_info = function() end }
dofile(arg[1])
for line in io.lines() do
  local normalised, field, problem = shockwave_parse_hint(line)
  if normalised then print("OK " .. normalised) else print("ERR " .. field .. " " .. problem) end
end
