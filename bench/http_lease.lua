-- http_lease.lua - wrk script: lease-then-settle round trips against sluiced.
-- Each thread keeps the lease ids it was granted; the next request settles one when
-- there is one, else asks for a new lease. So requests alternate lease, settle.
local pending = {}
local n = 0
local lease_body = '{"agent":"bench-%d","input_tokens":100,"output_tokens":10}'
local settle_body = '{"input_tokens":90,"output_tokens":8}'
local headers = {["Content-Type"] = "application/json"}

function setup(thread)
  n = n + 1
  thread:set("id", n)
end

function request()
  local lease = table.remove(pending)
  if lease then
    return wrk.format("POST", "/v1/leases/" .. lease .. "/settle", headers, settle_body)
  end
  return wrk.format("POST", "/v1/leases", headers, string.format(lease_body, id or 0))
end

function response(status, hdrs, body)
  if status == 200 then
    local lease = body:match('"lease":"(l_%d+)"')
    if lease then
      table.insert(pending, lease)
    end
  end
end
