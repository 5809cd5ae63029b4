--[==[ slurm-shockwave job_submit.lua (Slurm's job_submit/lua plugin; Lua 5.1).

For jobs in the managed partition: validate the adaptation hint given with
`sbatch --comment "bs=... epochs=... [model=...] [mode=...] [gpus=LO-HI] [signal=... [grace=...]]"`,
reject a malformed one at submit time with a message naming the field, store the
normalised hint in the admin-only comment (users cannot change it after submit) with the
time of submission (`submitted=<epoch>`, which a requeue does not move) and the GPUs it
asked for (`asked_gpus=<count>`, which the service's resizes do not move) with its
node range (`asked_nodes=<fewest>-<most>`, 0: no most), and,
while the scheduler service is alive (its heartbeat file is fresh), hold the job so
nothing starts before the planner decides, and refuse its owner's release of that hold.
With no fresh heartbeat the job is not held: it runs under Slurm alone (fail-open).
A user's hold is recorded in the job's comment (` held=owner`): the owner's own, or
another user's (their account coordinator's), so the service never releases it, and any
release clears it (docs/service.md).

The grammar is the one in slurm_shockwave/slurm/hints.py (docs/hints.md), message for
message; tests/test_hints.py runs both on the same cases and on random strings. Other
partitions pass through untouched.
]==]

-- Settings: docker-slurm/start.sh and admins edit these lines.
SHOCKWAVE_PARTITION = SHOCKWAVE_PARTITION or "shockwave"
-- Used only when the partition records Slurm passes say nothing about which partition is
-- the default (a job that names no partition lands there): is that ours?
if SHOCKWAVE_IS_DEFAULT == nil then SHOCKWAVE_IS_DEFAULT = false end
-- Written by the scheduler service: "<unix_time> <stale_after_s>" on its first line.
SHOCKWAVE_HEARTBEAT = SHOCKWAVE_HEARTBEAT or "/var/lib/slurm-shockwave/heartbeat"

local MODELS = {
  resnet18 = "ResNet-18", resnet50 = "ResNet-50", transformer = "Transformer",
  lm = "LM", recommendation = "Recommendation",
}
local KEYS = { model = true, bs = true, epochs = true, mode = true, gpus = true,
               signal = true, grace = true }
local KEY_LIST = "model, bs, epochs, mode, gpus, signal, grace"
local MAX_GPUS = 1024
local MODES = { static = true, accordion = true, gns = true }
local SIGNALS = { USR1 = true, USR2 = true, TERM = true, INT = true, HUP = true }
local MAX_BYTES = 1000
-- ASCII whitespace only, spelt out (never %s, whose meaning follows the C locale).
local WS = "[ \t\n\r\f\v]"
local NOT_WS = "[^ \t\n\r\f\v]+"

-- A value as it appears in a message: quoted when short printable ASCII.
local function shown(value)
  if #value >= 1 and #value <= 64 and string.match(value, "^[!-~]+$") then
    return "'" .. value .. "'"
  end
  return "a value not shown (empty, too long or not printable ASCII)"
end

-- Plain ASCII digits, at most 7 of them (so tonumber never sees a float or a sign).
local function integer(value, upper)
  if not string.match(value, "^[0-9]+$") or #value > 7 then return nil end
  local n = tonumber(value)
  if n < 1 or n > upper then return nil end
  return n
end

local function integer_problem(value, upper)
  return "expected an integer from 1 to " .. upper .. ", got " .. shown(value)
end

-- Without the ASCII whitespace at either end.
local function trimmed(text)
  return (string.gsub(string.gsub(text, "^" .. WS .. "+", ""), WS .. "+$", ""))
end

-- What follows PREFIX when it is a token of its own (whitespace or nothing after it), else
-- nil: "shockwave:v1bs=32" is no prefix and a bs (a red-team).
local function after_prefix(body, prefix)
  if string.sub(body, 1, #prefix) ~= prefix then return nil end
  local rest = string.sub(body, #prefix + 1)
  if rest == "" or string.match(rest, "^" .. WS) then return rest end
  return nil
end

-- Returns the normalised hint, or nil, field, problem.
function shockwave_parse_hint(text)
  text = text or ""
  if #text > MAX_BYTES then return nil, "hint", "longer than " .. MAX_BYTES .. " bytes" end
  local body = trimmed(text)
  body = after_prefix(body, "shockwave:v1") or after_prefix(body, "shockwave:") or body
  local seen = {}
  for token in string.gmatch(body, NOT_WS) do
    local key, value = string.match(token, "^([a-z_]+)=([!-~]+)$")
    if not key then
      return nil, "hint", "expected key=value (key a-z or _, value printable ASCII), got "
                          .. shown(token)
    end
    if not KEYS[key] then
      return nil, key, "unknown key (known: " .. KEY_LIST .. ")"
    end
    if seen[key] then return nil, key, "given twice" end
    seen[key] = value
  end
  for _, required in ipairs({ "bs", "epochs" }) do
    if not seen[required] then return nil, required, "missing" end
  end
  local model = seen.model or ""
  if model ~= "" then
    if #model > 64 or not string.match(model, "^[A-Za-z0-9][A-Za-z0-9._+%-]*$") then
      return nil, "model", "expected a letter or digit then up to 63 letters, digits, "
                           .. "'.', '_', '+' or '-', got " .. shown(model)
    end
    model = MODELS[string.gsub(string.lower(model), "[^a-z0-9]", "")] or model
  end
  local bs = integer(seen.bs, 1000000)
  if not bs then return nil, "bs", integer_problem(seen.bs, 1000000) end
  local epochs = integer(seen.epochs, 100000)
  if not epochs then return nil, "epochs", integer_problem(seen.epochs, 100000) end
  local mode = seen.mode or "static"
  if not MODES[mode] then
    return nil, "mode", "expected static, accordion or gns, got " .. shown(mode)
  end
  local gpus = nil
  if seen.gpus then
    local lo, hi = string.match(seen.gpus, "^([0-9]+)%-([0-9]+)$")
    lo = lo and #lo <= 4 and tonumber(lo)
    hi = hi and #hi <= 4 and tonumber(hi)
    if not lo or not hi or lo < 1 or lo > hi or hi > MAX_GPUS then
      return nil, "gpus", "expected LO-HI with integers 1 <= LO <= HI <= " .. MAX_GPUS
                          .. ", got " .. shown(seen.gpus)
    end
    gpus = string.format("%d-%d", lo, hi)
  end
  local signal = nil
  if seen.signal then
    signal = string.upper(seen.signal)
    if string.sub(signal, 1, 3) == "SIG" then signal = string.sub(signal, 4) end
    if not SIGNALS[signal] then
      return nil, "signal", "expected one of USR1, USR2, TERM, INT, HUP, got "
                            .. shown(seen.signal)
    end
  end
  local grace = 60
  if seen.grace then
    if not signal then
      return nil, "grace", "allowed only with signal= (the time the job gets after its "
                           .. "checkpoint signal)"
    end
    grace = integer(seen.grace, 3600)
    if not grace then return nil, "grace", integer_problem(seen.grace, 3600) end
  end
  local out = "shockwave:v1 "
  if model ~= "" then out = out .. "model=" .. model .. " " end
  out = out .. string.format("bs=%d epochs=%d mode=%s", bs, epochs, mode)
  if gpus then out = out .. " gpus=" .. gpus end
  if signal then out = out .. string.format(" signal=%s grace=%d", signal, grace) end
  return out
end

-- GPUs in one item of a TRES request: gres[:/]gpu[:TYPE][:COUNT] (0 otherwise); a GRES
-- without a count is one GPU, as Slurm reads it. json_shapes.gpus_in in Python, case
-- for case (tests/test_hints.py): the count stamped here must be the one the service
-- reads from Slurm at submit.
local GPU_TYPE = "^[A-Za-z0-9_.%-]+$"
-- Returns the item's GPUs and their type ("" untyped).
local function gpu_item(item)
  local head, rest = string.sub(item, 1, 8), string.sub(item, 9)
  if head ~= "gres:gpu" and head ~= "gres/gpu" then return 0, "" end
  if rest == "" then return 1, "" end
  local one = string.match(rest, "^:([^:]*)$")
  if one then
    if string.match(one, "^[0-9]+$") then return #one <= 7 and tonumber(one) or 0, "" end
    return string.match(one, GPU_TYPE) and 1 or 0, one
  end
  local kind, count = string.match(rest, "^:([^:]*):([^:]*)$")
  if kind and string.match(kind, GPU_TYPE) and string.match(count, "^[0-9]+$")
      and #count <= 7 then
    return tonumber(count), kind
  end
  return 0, ""
end

-- The first item of a TRES request that is not GPUs (gres:nvme:100, gres/mps:50; nil
-- where there is none).
function shockwave_other_gres(spec)
  for item in string.gmatch(type(spec) == "string" and spec or "", "[^,]+") do
    local head = string.sub(item, 1, 8)
    if head ~= "gres:gpu" and head ~= "gres/gpu" then return item end
  end
  return nil
end

-- GPUs in a TRES request (tres_per_node from --gres or --gpus-per-node, tres_per_job
-- from --gpus, tres_per_task from --gpus-per-task): gres:gpu:4 (22.05), gres/gpu:a100:4
-- (23.x on; per task gres/gpu:a100=4, read with = for :), items comma-separated.
function shockwave_gpus_in(spec)
  local total = 0
  local text = string.gsub(type(spec) == "string" and spec or "", "=", ":")
  for item in string.gmatch(text, "[^,]+") do
    total = total + gpu_item(item)
  end
  return total
end

-- Whether a job asks for its GPUs in a way Slurm counts by rules of its own: two GPU
-- items in one request (--gres=gpu:1 with --gpus-per-node=2: Slurm gives 1 a node, the
-- sum read 3), GPUs both per node and per job (--gres=gpu:1 --gpus=2: Slurm spreads the
-- job over 2 nodes, 2 GPUs, the sum read 4), or two GPU types (no node has both). Per
-- task beside either is Slurm's to make agree (shockwave_job_gpus).
function shockwave_gpu_mix(tres_per_node, tres_per_job, tres_per_task)
  local types, asked_in = {}, {}
  for name, spec in pairs({ node = tres_per_node, job = tres_per_job, task = tres_per_task }) do
    local text = string.gsub(type(spec) == "string" and spec or "", "=", ":")
    local items = 0
    for item in string.gmatch(text, "[^,]+") do
      local count, kind = gpu_item(item)
      if count > 0 then
        items = items + 1
        if kind ~= "" then types[kind] = true end
      end
    end
    if items > 1 then return true end
    asked_in[name] = items == 1
  end
  if asked_in.node and asked_in.job then return true end
  local named = 0
  for _ in pairs(types) do named = named + 1 end
  return named > 1
end

-- `scontrol release` asks for priority INFINITE, a hold for 0; NO_VAL leaves it (slurm.h).
local RELEASE = 4294967295
local NO_VAL = 4294967294

-- A count Slurm passes (min_nodes, num_tasks): a whole number from 1 below NO_VAL, else
-- the default (unset, NO_VAL).
local function given_count(value, default)
  if type(value) == "number" and value >= 1 and value < NO_VAL
      and value == math.floor(value) then
    return value
  end
  return default
end

-- GPUs a submission asks for: per node times its nodes (min_nodes; NO_VAL or unset: 1),
-- plus per job; or, when it asks per task, per task times its tasks (num_tasks; unset:
-- the per-job or per-node GPUs over the per-task ones, else a task per node, as Slurm
-- derives them); json_shapes.job_gpus does the same with the counts squeue lists.
function shockwave_job_gpus(tres_per_node, tres_per_job, min_nodes, tres_per_task, num_tasks)
  local nodes = given_count(min_nodes, 1)
  local whole = shockwave_gpus_in(tres_per_job) + shockwave_gpus_in(tres_per_node) * nodes
  local each = shockwave_gpus_in(tres_per_task)
  if each == 0 then return whole end
  local tasks = given_count(num_tasks, nil)
  if tasks == nil then
    tasks = whole >= each and math.floor(whole / each) or nodes
  end
  return each * tasks
end

-- The heartbeat file's head (nil where it cannot be read).
local function heartbeat_head(path)
  local f = io.open(path or SHOCKWAVE_HEARTBEAT, "r")
  if not f then return nil end
  local head = f:read(128)
  f:close()
  if type(head) ~= "string" then return nil end
  return head
end

-- Is the scheduler service alive? Its heartbeat file's first line is
-- "<unix_time> <stale_after_s>". Anything missing, unreadable or odd means no.
function shockwave_service_alive(path, now)
  local ok, alive = pcall(function()
    local head = heartbeat_head(path)
    if head == nil then return false end
    local t, stale = string.match(head, "^([0-9]+) ([0-9]+)\r?\n")
    if not t then t, stale = string.match(head, "^([0-9]+) ([0-9]+)$") end
    if not t or #t > 12 or #stale > 12 then return false end
    return (now or os.time()) - tonumber(t) <= tonumber(stale)
  end)
  return ok and alive == true
end

-- Does a job that names no partition land in ours? Slurm's partition records (only
-- those the user may use) carry flag_default; without them, SHOCKWAVE_IS_DEFAULT.
function shockwave_default_is_managed(part_list)
  if type(part_list) == "table" then
    local ours = part_list[SHOCKWAVE_PARTITION]
    if ours ~= nil and ours.flag_default ~= nil then return ours.flag_default == 1 end
    for name, part in pairs(part_list) do
      if part.flag_default == 1 then return name == SHOCKWAVE_PARTITION end
    end
  end
  return SHOCKWAVE_IS_DEFAULT == true
end

-- "managed", "other" or "mixed" (ours listed with others) for a partition list.
function shockwave_partition_kind(partition, part_list)
  if partition == nil or partition == "" then
    return shockwave_default_is_managed(part_list) and "managed" or "other"
  end
  local ours, others = false, false
  for name in string.gmatch(partition, "[^,]+") do
    if name == SHOCKWAVE_PARTITION then ours = true else others = true end
  end
  if ours and others then return "mixed" end
  return ours and "managed" or "other"
end

-- A hold the planner must not lift, recorded at the end of the job's comment: " held=owner"
-- (a user's `scontrol hold`, written here: its owner's, or their account coordinator's)
-- or " held=requeue" (a requeue-hold, which this plugin never sees: the service writes
-- it, so that the owner's release passes).
-- The admin comment cannot carry it: Slurm refuses an admin comment the plugin sets on
-- a user's update (22.05: "Attempt to change admin_comment"). hints.py's split_hold_mark
-- reads it, case for case (tests/test_hints.py).
local HOLD_MARKS = { owner = true, requeue = true }

-- The comment without its hold mark, and the mark (nil when it has none).
function shockwave_split_mark(comment)
  comment = type(comment) == "string" and comment or ""
  local text, mark = string.match(comment, "^(.*) held=([a-z]+)$")
  if text == nil then text, mark = "", string.match(comment, "^held=([a-z]+)$") end
  if mark ~= nil and HOLD_MARKS[mark] then return text, mark end
  return comment, nil
end

function shockwave_with_mark(text, mark)
  if text == "" then return "held=" .. mark end
  return text .. " held=" .. mark
end

-- The message goes to the user (sbatch prints it; scontrol update does not in 22.05, so
-- it goes to slurmctld's log too, with the job id when there is one).
local function reject(job_id, fmt, ...)
  local msg = string.format(fmt, ...)
  slurm.log_user("%s", msg)
  slurm.log_info("%s%s", job_id and ("job " .. tostring(job_id) .. ": ") or "", msg)
  return slurm.ERROR
end

local NO_HINT = "shockwave: jobs in the " .. SHOCKWAVE_PARTITION .. " partition say what"
                .. " they train in --comment, at least the batch size and epochs, e.g."
                .. " --comment \"bs=32 epochs=90\" (all keys: slurm-shockwave's"
                .. " docs/hints.md)"

local MIXED = "shockwave: the " .. SHOCKWAVE_PARTITION .. " partition cannot be combined "
              .. "with other partitions; submit to it alone"

local ARRAY = "shockwave: job arrays are not planned in the " .. SHOCKWAVE_PARTITION
              .. " partition (one hold and one priority would act on every task at once);"
              .. " submit each task as its own job, e.g. a loop of sbatch"

-- A field of the job, from the update where it gives it, else the job record's
-- (``job_rec``: a job moved into the partition; nil at submit).
local function job_field(job_desc, job_rec, name)
  local value = job_desc[name]
  if (value == nil or value == "" or value == NO_VAL) and job_rec ~= nil then
    value = job_rec[name]
  end
  return value
end

-- The GPUs a job asks for; 0 (no stamp) for a job moved in that asks per task with no
-- task count in the update: a job record has no num_tasks (slurm_lua.c). The stamp is
-- read only for elastic jobs, which cannot ask per task.
local function asked(job_desc, job_rec)
  local function field(name) return job_field(job_desc, job_rec, name) end
  if job_rec ~= nil and given_count(job_desc.num_tasks, nil) == nil
      and shockwave_gpus_in(field("tres_per_task")) > 0 then
    return 0
  end
  return shockwave_job_gpus(field("tres_per_node"), field("tres_per_job"), field("min_nodes"),
                            field("tres_per_task"), field("num_tasks"))
end

local INTERACTIVE = "shockwave: interactive jobs (salloc, srun) are not planned in the "
                    .. SHOCKWAVE_PARTITION .. " partition: Slurm requeues only batch jobs,"
                    .. " so the planner could never stop one; submit it with sbatch"

local HETEROGENEOUS = "shockwave: heterogeneous jobs are not planned in the "
                      .. SHOCKWAVE_PARTITION .. " partition (a hold, a release or a"
                      .. " requeue acts on every component at once); submit each"
                      .. " component as its own job"

local NAME = "shockwave: a job name in the " .. SHOCKWAVE_PARTITION .. " partition may not"
             .. " hold a control character (a newline, a tab) or '|': the service reads"
             .. " jobs from Slurm's one-line listings, which such a name breaks"

-- Whether a job name is one the service's listings read whole (nil and "" are).
local function readable_name(name)
  return type(name) ~= "string" or not string.find(name, "[%c|]")
end

local NO_REQUEUE = "shockwave: a job in the " .. SHOCKWAVE_PARTITION .. " partition must be"
                   .. " requeueable: the planner stops a job by requeueing it (after its"
                   .. " checkpoint signal); submit it without --no-requeue"

local PER_TASK = "shockwave: an elastic job (gpus=LO-HI in --comment) asks for its GPUs"
                 .. " with --gres=gpu:N, --gpus-per-node or --gpus, not --gpus-per-task:"
                 .. " Slurm refuses a GRES update of a job that asks per task, so it"
                 .. " cannot be resized"

local GPU_MIX = "shockwave: a job in the " .. SHOCKWAVE_PARTITION .. " partition asks for"
                .. " its GPUs one way (--gres=gpu:N, --gpus-per-node=N or --gpus=N; with"
                .. " --gpus-per-task=N beside it if you like) and of one type: Slurm counts"
                .. " a mix by rules of its own, and the planner would keep GPUs for the"
                .. " job that it never uses"

local OTHER_GRES = "shockwave: an elastic job (gpus=LO-HI in --comment) asks for no GRES"
                   .. " but GPUs: each resize sets its GRES to its GPUs alone, which would"
                   .. " drop "

-- Validate a managed job's hint into job_desc; returns slurm.SUCCESS or slurm.ERROR.
local function admit(job_desc, comment, job_id, job_rec)
  if job_desc.array_inx ~= nil and job_desc.array_inx ~= "" then
    return reject(job_id, "%s", ARRAY)
  end
  -- Slurm refuses the requeue of a job with no batch script, and a het job's holds,
  -- releases and requeues act on all its components (job_mgr.c)
  if job_rec == nil and job_desc.script == nil or job_rec ~= nil and job_rec.script == nil then
    return reject(job_id, "%s", INTERACTIVE)
  end
  -- at submit, het_job_offset is NO_VAL unless a het job (its leader's: 0); an update
  -- gives 0 (measured on 22.05), so a job moved in is asked its record's het_job_id
  local offset = job_desc.het_job_offset
  if job_rec == nil and type(offset) == "number" and offset >= 0 and offset < NO_VAL
      or job_rec ~= nil and given_count(job_rec.het_job_id, nil) ~= nil then
    return reject(job_id, "%s", HETEROGENEOUS)
  end
  if not readable_name(job_field(job_desc, job_rec, "name")) then
    return reject(job_id, "%s", NAME)
  end
  -- a hold mark is this plugin's and the service's to write: one the user wrote into
  -- the comment is dropped, or the owner's release would pass as if of their own hold
  -- (found by a red-team); `sbatch --hold` is marked again below
  local text, mark = shockwave_split_mark(comment)
  if mark ~= nil then comment, job_desc.comment = text, text end
  -- the grammar reads a tab or a line break in a hint as a space, but Slurm's one-line
  -- listings break at a line break: the comment keeps a space in its place (a review: a
  -- comment holding one sent every round's listing down its slow path)
  if type(comment) == "string" then
    local spaced, replaced = string.gsub(comment, "[\t\n\v\f\r]", " ")
    if replaced > 0 then comment, job_desc.comment = spaced, spaced end
  end
  local normalised, field, problem = shockwave_parse_hint(comment)
  if not normalised and string.find(comment or "", "%S") == nil then
    -- no hint at all: say what one is, not "field 'bs': missing" (an admin walkthrough)
    return reject(job_id, "%s", NO_HINT)
  end
  if not normalised then
    return reject(job_id, "shockwave: bad hint in --comment: field '%s': %s", field, problem)
  end
  if job_desc.requeue == 0 then
    -- Slurm refuses the planner's requeue of it ("presently disabled"): never preempted
    return reject(job_id, "%s", NO_REQUEUE)
  end
  if shockwave_gpu_mix(job_field(job_desc, job_rec, "tres_per_node"),
                       job_field(job_desc, job_rec, "tres_per_job"),
                       job_field(job_desc, job_rec, "tres_per_task")) then
    return reject(job_id, "%s", GPU_MIX)
  end
  local elastic = string.find(normalised, " gpus=", 1, true)
  if elastic and shockwave_gpus_in(job_field(job_desc, job_rec, "tres_per_task")) > 0 then
    return reject(job_id, "%s", PER_TASK)
  end
  local other = elastic and (
    shockwave_other_gres(job_field(job_desc, job_rec, "tres_per_node"))
    or shockwave_other_gres(job_field(job_desc, job_rec, "tres_per_job")))
  if other then
    return reject(job_id, "%s%s", OTHER_GRES, other)
  end
  -- the first submission, stamped: Slurm moves a requeued job's submit time to the
  -- requeue, and the planner must not take a preempted job for a new arrival; and the
  -- GPUs it asked for: the service changes an elastic job's GRES as it resizes it, and
  -- a requeue by Slurm keeps the changed count (hints.py's split_admin_comment and
  -- asked_gpus read them back)
  local stamp = " submitted=" .. tostring(os.time())
  local gpus = asked(job_desc, job_rec)
  -- and its node range, MIN-MAX (0: no most, as Slurm lists it): Slurm lists a pending
  -- job's node count as its last run's or its own estimate, and the service's resizes
  -- pin the range (hints.py's asked_nodes reads it back; without MAX: an older stamp)
  local nodes = given_count(job_field(job_desc, job_rec, "min_nodes"), 1)
  local most = given_count(job_field(job_desc, job_rec, "max_nodes"), 0)
  if most < nodes then most = 0 end
  if gpus >= 1 and gpus <= 9999999 and nodes <= 9999999 and most <= 9999999 then
    stamp = stamp .. string.format(" asked_gpus=%d asked_nodes=%d-%d", gpus, nodes, most)
  end
  job_desc.admin_comment = normalised .. stamp
  if job_desc.priority == 0
      or (job_rec ~= nil and job_rec.priority == 0 and job_desc.priority ~= RELEASE) then
    -- `sbatch --hold`, or a job held before it was moved in (not by this update's
    -- release): a user's own hold, which Slurm records as the planner's (both a user
    -- hold): marked as `scontrol hold` by its owner is, so the planner keeps it
    job_desc.comment = shockwave_with_mark(comment, "owner")
  elseif job_rec ~= nil then
    -- moved in: no hold here. Slurm records a hold set in an admin's update as the
    -- admin's own (JobHeldAdmin), which the planner never lifts: the job waited for ever
    -- beside idle GPUs (a red-team). The service holds it at its next round unless the
    -- plan starts it; until then Slurm may start it on free GPUs.
    slurm.log_info("shockwave: job %s moved into %s: not held here; the planner holds or "
                   .. "starts it at its next round", tostring(job_id), SHOCKWAVE_PARTITION)
  elseif shockwave_service_alive() then
    job_desc.priority = 0 -- held until the planner releases it
  else
    slurm.log_info("shockwave: no fresh heartbeat at %s: job not held (fail-open)",
                   SHOCKWAVE_HEARTBEAT)
  end
  return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local kind = shockwave_partition_kind(job_desc.partition, part_list)
  if kind == "mixed" then return reject(nil, "%s", MIXED) end
  if kind ~= "managed" then return slurm.SUCCESS end
  return admit(job_desc, job_desc.comment)
end

local function refuse_release(job_rec)
  return reject(job_rec.job_id, "shockwave: job %s is held for the %s partition's "
                .. "planner, which releases it when it plans its GPUs, or by an admin; "
                .. "its owner cannot release it (`shockwave explain %s` says why it waits)",
                tostring(job_rec.job_id), SHOCKWAVE_PARTITION, tostring(job_rec.job_id))
end

-- SlurmUser's uid, read once from /proc: this plugin runs inside slurmctld, as SlurmUser
-- (nil where it cannot be read; a test sets SHOCKWAVE_SLURM_UID).
function shockwave_slurm_uid()
  if SHOCKWAVE_SLURM_UID == nil then
    local ok, uid = pcall(function()
      local f = io.open("/proc/self/status", "r")
      if not f then return nil end
      local text = f:read("*a")
      f:close()
      return tonumber(string.match(text or "", "\nUid:[ \t]+([0-9]+)"))
    end)
    SHOCKWAVE_SLURM_UID = ok and uid or false
  end
  return SHOCKWAVE_SLURM_UID or nil
end

-- The service's uid, from its heartbeat's second line "uid <n>" (nil where it has none):
-- the service's holds are the planner's, whichever account it runs as.
function shockwave_service_uid(path)
  local ok, uid = pcall(function()
    local head = heartbeat_head(path)
    local n = head and string.match(head, "\nuid ([0-9]+)\r?\n")
    if not n or #n > 10 then return nil end
    return tonumber(n)
  end)
  return ok and uid or nil
end

-- Root, SlurmUser and the service: the uids Slurm (and this plugin) knows as privileged,
-- and the planner's own. An operator or admin (AdminLevel) is privileged in Slurm too,
-- but a plugin is never told a user's admin level: here they count as users, as an
-- account coordinator does (in Slurm a coordinator is not privileged: its hold of
-- another user's job is a user hold).
function shockwave_privileged(uid)
  return uid == 0 or uid == shockwave_slurm_uid() or uid == shockwave_service_uid()
end

-- Holds and releases of a managed job. The planner's hold is a user hold (so that an
-- admin's `scontrol hold` is told apart, and kept): its owner may not release it while
-- the service is alive; anyone else Slurm lets (root, operators, the account's
-- coordinator) may, and with no fresh heartbeat anyone may (fail-open). A hold by a user
-- (`scontrol hold`/`uhold`, priority 0, from any uid but root's, SlurmUser's and the
-- service's), of a pending or a running job (Slurm keeps a running job's hold through a
-- requeue), is marked "owner" whatever the heartbeat, so the service, alive now or
-- later, never releases it: the owner's own hold, or another user's (in Slurm, the account's
-- coordinator; a user hold, which Slurm lets the owner release). Any release of a marked
-- job ends the hold the mark records and clears it; the owner's release, of a pending job
-- while the service is alive, leaves the planner's hold (priority NO_VAL: unchanged), so
-- the plan decides when it starts. Privileged holds and releases (the service's, root's,
-- among them) never set a mark, and the service never releases a marked job.
local function hold_or_release(job_desc, job_rec, owner, privileged)
  local text, mark = shockwave_split_mark(job_rec.comment)
  if job_desc.priority == RELEASE then
    if mark ~= nil then
      job_desc.comment = text
      local pending = type(job_rec.job_state) == "number" and job_rec.job_state % 256 == 0
      if owner and mark == "owner" and pending and shockwave_service_alive() then
        job_desc.priority = NO_VAL
      end
    elseif owner and job_rec.priority == 0 and shockwave_service_alive() then
      return refuse_release(job_rec)
    end
  elseif job_desc.priority == 0 and not privileged and mark == nil then
    job_desc.comment = shockwave_with_mark(text, "owner")
  end
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  local was = shockwave_partition_kind(job_rec.partition, nil)
  local asked_comment = job_desc.comment
  -- read only for a managed job (privileged reads the heartbeat): slurmctld calls this
  -- for every update of every job
  local privileged, owner = false, false
  if was == "managed" then
    privileged = shockwave_privileged(modify_uid)
    owner = not privileged and modify_uid == job_rec.user_id
  end
  if was == "managed" and asked_comment ~= nil and asked_comment ~= job_rec.comment then
    -- the hint is fixed; only its hold mark changes, and only by root, an operator or
    -- the service (a requeue-hold's mark), never by the owner, whose release it governs
    if owner or trimmed((shockwave_split_mark(asked_comment)))
                ~= trimmed((shockwave_split_mark(job_rec.comment))) then
      return reject(job_rec.job_id, "shockwave: the hint (comment) of a job in the %s "
                    .. "partition is fixed at submit; cancel and resubmit the job to "
                    .. "change it", SHOCKWAVE_PARTITION)
    end
  end
  if was == "managed" and job_desc.requeue == 0 then
    return reject(job_rec.job_id, "%s", NO_REQUEUE)
  end
  if was == "managed" and not readable_name(job_desc.name) then
    return reject(job_rec.job_id, "%s", NAME)
  end
  if was == "managed" and job_desc.priority ~= nil then
    local rc = hold_or_release(job_desc, job_rec, owner, privileged)
    if rc ~= slurm.SUCCESS then return rc end
  end
  if was == "managed" and (job_desc.tres_per_node ~= nil or job_desc.tres_per_job ~= nil
                           or job_desc.tres_per_task ~= nil)
      and shockwave_gpu_mix(job_field(job_desc, job_rec, "tres_per_node"),
                            job_field(job_desc, job_rec, "tres_per_job"),
                            job_field(job_desc, job_rec, "tres_per_task")) then
    -- GPUs asked a second way after admission, as at submit (GPU_MIX; a review); the
    -- service's resizes set the one field the job asked in
    return reject(job_rec.job_id, "%s", GPU_MIX)
  end
  if was == "managed" then
    -- other GRES given to an elastic job after its admission: its next resize would drop
    -- them, as at submit (OTHER_GRES; a review found an update let them in)
    local other = shockwave_other_gres(job_desc.tres_per_node)
                  or shockwave_other_gres(job_desc.tres_per_job)
    local hint = job_rec.admin_comment
    if hint == nil or hint == "" then hint = job_rec.comment end
    if other and string.find(" " .. (hint or ""), " gpus=", 1, true) then
      return reject(job_rec.job_id, "%s%s", OTHER_GRES, other)
    end
  end
  if job_desc.partition ~= nil and job_desc.partition ~= "" then
    local kind = shockwave_partition_kind(job_desc.partition, part_list)
    if kind == "mixed" then return reject(job_rec.job_id, "%s", MIXED) end
    if kind == "managed" and was ~= "managed" then
      if job_rec.array_job_id ~= nil and job_rec.array_job_id ~= 0 then
        return reject(job_rec.job_id, "%s", ARRAY)
      end
      -- moved into the managed partition: validated exactly as at submit
      local comment = asked_comment
      if comment == nil then comment = job_rec.comment end
      return admit(job_desc, comment, job_rec.job_id, job_rec)
    end
  end
  return slurm.SUCCESS
end

return slurm.SUCCESS
