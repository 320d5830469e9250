-- Argo CD health check for kquota's resources (ClientQuota,
-- ControllerMutationQuota, TopicQuota, KafkaCluster), read from the
-- kstatus-style status the operator writes.
--
-- The rules run in kstatus' order (the library Flux reads status with), and
-- deploy/flux/health-check-exprs.yaml states the same rules for Flux, so both
-- tools agree by construction:
--   (Argo CD itself: a resource being deleted is Progressing, "Pending deletion")
--   1. no status yet: Progressing (kstatus alone says Current here)
--   2. observedGeneration missing or not metadata.generation: Progressing
--   3. Reconciling=True: Progressing (under way, retried on its own)
--   4. Stalled=True: Degraded (only a change to the resource or a grant helps)
--   5. Ready=True: Healthy
--   6. anything else (Ready False, Unknown or missing): Progressing
-- Lua 5.1 with only the base and table libraries, as Argo CD runs a health
-- check (gopher-lua); tests/unit/test_argocd_health.py runs it that way.
local hs = {}

local function condition(ctype)
  if obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == ctype then
      return c
    end
  end
  return nil
end

local function describe(c)
  local text = c.reason or c.type
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end

-- 1
if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the kquota operator to report status"
  return hs
end

-- 2
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if observed == nil or (generation ~= nil and observed ~= generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the kquota operator to observe generation " .. tostring(generation)
  return hs
end

-- 3
local reconciling = condition("Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(reconciling)
  return hs
end

-- 4
local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(stalled)
  return hs
end

-- 5
local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready)
  return hs
end

-- 6
hs.status = "Progressing"
if ready ~= nil then
  hs.message = describe(ready)
else
  hs.message = "Waiting for the Ready condition"
end
return hs
