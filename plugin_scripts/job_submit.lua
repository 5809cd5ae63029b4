--[[ slurm-shockwave job_submit.lua (Slurm's job_submit/lua plugin; Lua 5.1).

For jobs in the managed partition: validate the adaptation hint given with
`sbatch --comment "model=... bs=... epochs=... [mode=...] [signal=...] [grace=...]"`,
reject a malformed one at submit time with a message naming the field, store the
normalised hint in the admin-only comment (users cannot change it after submit), and
hold the job so nothing starts before the planner decides.

The grammar is the one in slurm_shockwave/slurm/hints.py (docs/hints.md); both run the
cases in tests/data/hints.json. Other partitions pass through untouched.
]]

SHOCKWAVE_PARTITION = SHOCKWAVE_PARTITION or "shockwave"
-- A job that names no partition lands in the default one; say whether that is ours.
SHOCKWAVE_IS_DEFAULT = (SHOCKWAVE_IS_DEFAULT == nil) and true or SHOCKWAVE_IS_DEFAULT

local MODELS = {
  resnet18 = "ResNet-18", resnet50 = "ResNet-50", transformer = "Transformer",
  lm = "LM", recommendation = "Recommendation",
}
local MODEL_LIST = "ResNet-18, ResNet-50, Transformer, LM, Recommendation"
local KEYS = { model = true, bs = true, epochs = true, mode = true, signal = true, grace = true }
local KEY_LIST = "model, bs, epochs, mode, signal, grace"
local MODES = { static = true, accordion = true, gns = true }
local SIGNALS = { USR1 = true, USR2 = true, TERM = true, INT = true, HUP = true }

local function positive(value, upper)
  if not string.match(value, "^[0-9]+$") then return nil end
  local n = tonumber(value)
  if n < 1 or (upper and n > upper) then return nil end
  return n
end

-- Returns the normalised hint, or nil, field, problem.
function shockwave_parse_hint(text)
  local body = string.gsub(text or "", "^%s+", "")
  body = string.gsub(body, "%s+$", "")
  if string.sub(body, 1, 12) == "shockwave:v1" then
    body = string.sub(body, 13)
  elseif string.sub(body, 1, 10) == "shockwave:" then
    body = string.sub(body, 11)
  end
  local seen = {}
  for token in string.gmatch(body, "%S+") do
    local key, value = string.match(token, "^([a-z_]+)=(%S+)$")
    if not key then
      return nil, "hint", "expected key=value, got '" .. token .. "'"
    end
    if not KEYS[key] then
      return nil, key, "unknown key (known: " .. KEY_LIST .. ")"
    end
    if seen[key] then return nil, key, "given twice" end
    seen[key] = value
  end
  for _, required in ipairs({ "model", "bs", "epochs" }) do
    if not seen[required] then return nil, required, "missing" end
  end
  local model = MODELS[string.gsub(string.lower(seen.model), "[^a-z0-9]", "")]
  if not model then
    return nil, "model", "unknown model '" .. seen.model .. "' (known: " .. MODEL_LIST .. ")"
  end
  local bs = positive(seen.bs)
  if not bs then return nil, "bs", "expected a positive integer, got '" .. seen.bs .. "'" end
  local epochs = positive(seen.epochs)
  if not epochs then
    return nil, "epochs", "expected a positive integer, got '" .. seen.epochs .. "'"
  end
  local mode = seen.mode or "static"
  if not MODES[mode] then
    return nil, "mode", "expected static, accordion or gns, got '" .. mode .. "'"
  end
  local signal = string.upper(seen.signal or "USR1")
  if string.sub(signal, 1, 3) == "SIG" then signal = string.sub(signal, 4) end
  if not SIGNALS[signal] then
    return nil, "signal", "expected one of USR1, USR2, TERM, INT, HUP, got '" .. seen.signal .. "'"
  end
  local grace = positive(seen.grace or "60", 3600)
  if not grace then
    return nil, "grace", "expected a positive integer from 1 to 3600, got '" .. seen.grace .. "'"
  end
  return string.format("shockwave:v1 model=%s bs=%d epochs=%d mode=%s signal=%s grace=%d",
                       model, bs, epochs, mode, signal, grace)
end

local function managed(job_desc)
  local partition = job_desc.partition
  if partition == nil or partition == "" then return SHOCKWAVE_IS_DEFAULT end
  for name in string.gmatch(partition, "[^,]+") do
    if name == SHOCKWAVE_PARTITION then return true end
  end
  return false
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  if not managed(job_desc) then return slurm.SUCCESS end
  local normalised, field, problem = shockwave_parse_hint(job_desc.comment)
  if not normalised then
    slurm.log_user("shockwave: bad hint in --comment: field '%s': %s", field, problem)
    return slurm.ERROR
  end
  job_desc.admin_comment = normalised
  job_desc.priority = 0 -- held until the planner releases it
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

return slurm.SUCCESS
