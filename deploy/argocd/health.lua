-- Argo CD health check for kquota's resources (ClientQuota,
-- ControllerMutationQuota, TopicQuota, KafkaCluster), read from the
-- kstatus-style status the operator writes: observedGeneration, a Ready
-- summary condition, Reconciling=True while work is under way and
-- Stalled=True when only a change to the resource can help.
-- Lua 5.1 (Argo CD runs gopher-lua); tests/unit/test_argocd_health.py runs it.
local hs = {}

local function condition(ctype)
  if obj.status == nil or obj.status.conditions == nil then
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

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the kquota operator to report status"
  return hs
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if observed == nil or (generation ~= nil and observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the kquota operator to observe generation " .. tostring(generation)
  return hs
end

local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(stalled)
  return hs
end

local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready)
  return hs
end

local reconciling = condition("Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(reconciling)
  return hs
end

if ready == nil or ready.status == "Unknown" then
  hs.status = "Progressing"
  if ready ~= nil then
    hs.message = describe(ready)
  else
    hs.message = "Waiting for the Ready condition"
  end
  return hs
end

hs.status = "Degraded"
hs.message = describe(ready)
return hs
