-- wrk script of the HTTP cells (bench/wrk.py). Environment:
--   BENCH_MODE   hot | spread | multi | soldout | healthz | product | queue_poll | queue_poll_unsigned | queue_join
--   BENCH_TOKENS file with one customer token per line (Bearer auth); queue_join takes them in order, each once
--                until the file is used up
--   BENCH_PASSES file with one waiting pass per line: "<customer token> <pass id> <signed pass>" (the queue polls:
--                GET /v1/queue/passes/<id> as its customer, queue_poll with the signed pass in Queue-Pass)
--   BENCH_PRODUCT           product id for hot / soldout / product / queue_join
--   BENCH_SPREAD_FIRST, BENCH_SPREAD_COUNT   the spread product ids
--   BENCH_CART   products per multi-item cart (default 3)
-- done() prints one line "BENCH_JSON {...}" with counts by status and latency percentiles (microseconds). 409s and
-- 503s are also counted by code (a plain substring search of the short error body, only for those statuses):
-- s409_lock_busy (row_lock_nowait), s409_gave_up (optimistic gave up: stock_conflict with gave_up_after),
-- s503_busy (code "busy": lock timeout or serialization retries ran out). swaiting: the queue polls' 200s whose body
-- is a waiting pass (what those modes count; anything else is an error).

local threads = {}
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("tid", next_id)
  table.insert(threads, thread)
end

function init(args)
  mode = os.getenv("BENCH_MODE") or "hot"
  hot = tonumber(os.getenv("BENCH_PRODUCT") or "101")
  first = tonumber(os.getenv("BENCH_SPREAD_FIRST") or "2001")
  count = tonumber(os.getenv("BENCH_SPREAD_COUNT") or "1000")
  cart = tonumber(os.getenv("BENCH_CART") or "3")
  tokens = {}
  local path = os.getenv("BENCH_TOKENS")
  if path then
    for line in io.lines(path) do
      if #line > 0 then table.insert(tokens, line) end
    end
  end
  passes = {}
  if mode == "queue_poll" or mode == "queue_poll_unsigned" then
    for line in io.lines(os.getenv("BENCH_PASSES")) do
      local token, id, signed = string.match(line, "^(%S+) (%d+) (%S+)$")
      if token then table.insert(passes, { token = token, id = id, signed = signed }) end
    end
    if #passes == 0 then error("no waiting passes in BENCH_PASSES") end
  end
  math.randomseed(os.time() * 1000 + tid)
  n = 0
  s201, s409, s2xx, s4xx, s5xx, sother, swaiting = 0, 0, 0, 0, 0, 0, 0
  s409_lock_busy, s409_gave_up, s503_busy = 0, 0, 0
end

local function item(pid)
  return string.format('{"product_id":%d,"qty":1}', pid)
end

function request()
  n = n + 1
  if mode == "healthz" then
    return wrk.format("GET", "/healthz")
  elseif mode == "product" then
    return wrk.format("GET", "/v1/products/" .. hot)
  elseif mode == "queue_join" then
    local token = tokens[(n - 1) % #tokens + 1]
    return wrk.format("POST", "/v1/products/" .. hot .. "/queue", { ["Authorization"] = "Bearer " .. token })
  elseif #passes > 0 then
    local p = passes[(n * 7 + tid * 13) % #passes + 1]
    local headers = { ["Authorization"] = "Bearer " .. p.token }
    if mode == "queue_poll" then headers["Queue-Pass"] = p.signed end
    return wrk.format("GET", "/v1/queue/passes/" .. p.id, headers)
  end
  local items
  if mode == "spread" then
    items = item(first + math.random(0, count - 1))
  elseif mode == "multi" then
    local chosen, parts = {}, {}
    while #parts < cart do
      local pid = first + math.random(0, count - 1)
      if not chosen[pid] then
        chosen[pid] = true
        table.insert(parts, item(pid))
      end
    end
    items = table.concat(parts, ",")
  else
    items = item(hot)
  end
  local token = tokens[(n * 7 + tid * 13) % #tokens + 1]
  return wrk.format("POST", "/v1/checkout",
    { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token },
    '{"items":[' .. items .. ']}')
end

function response(status, headers, body)
  if status == 200 and #passes > 0 and string.find(body, '"state":"waiting"', 1, true) then
    swaiting = swaiting + 1
  end
  if status == 201 then s201 = s201 + 1
  elseif status == 409 then
    s409 = s409 + 1
    if string.find(body, "lock_busy", 1, true) then s409_lock_busy = s409_lock_busy + 1
    elseif string.find(body, "gave_up_after", 1, true) then s409_gave_up = s409_gave_up + 1 end
  elseif status >= 200 and status < 300 then s2xx = s2xx + 1
  elseif status >= 400 and status < 500 then s4xx = s4xx + 1
  elseif status >= 500 then
    s5xx = s5xx + 1
    if status == 503 and string.find(body, '"busy"', 1, true) then s503_busy = s503_busy + 1 end
  else sother = sother + 1 end
end

function done(summary, latency, requests)
  local c = { s201 = 0, s409 = 0, s2xx = 0, s4xx = 0, s5xx = 0, sother = 0, swaiting = 0,
              s409_lock_busy = 0, s409_gave_up = 0, s503_busy = 0 }
  for _, thread in ipairs(threads) do
    for k, _ in pairs(c) do c[k] = c[k] + (thread:get(k) or 0) end
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,' ..
    '"timeouts":%d,"status_errors":%d,"s201":%d,"s409":%d,"s2xx":%d,"s4xx":%d,"s5xx":%d,"sother":%d,"swaiting":%d,' ..
    '"s409_lock_busy":%d,"s409_gave_up":%d,"s503_busy":%d,' ..
    '"p50_us":%d,"p95_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.timeout, e.status,
    c.s201, c.s409, c.s2xx, c.s4xx, c.s5xx, c.sother, c.swaiting, c.s409_lock_busy, c.s409_gave_up, c.s503_busy,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max, latency.mean))
end
