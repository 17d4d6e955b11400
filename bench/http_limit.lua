-- http_limit.lua - wrk script: action-limit checks, the same request to sluiced and to nginx.
-- Each request is POST /v1/limits/tool.call/check {"agent":"aN"} with the agent also in
-- X-Agent (nginx's limit_req key; sluiced ignores the header), N cycling over AGENTS.
local AGENTS = 100
local i = 0

function request()
  i = (i + 1) % AGENTS
  local agent = "a" .. i
  return wrk.format("POST", "/v1/limits/tool.call/check",
                    {["Content-Type"] = "application/json", ["X-Agent"] = agent},
                    '{"agent":"' .. agent .. '"}')
end

local allowed, denied = 0, 0
function response(status)
  if status == 200 then allowed = allowed + 1 elseif status == 429 then denied = denied + 1 end
end
