-- wrk script for `make load`: the issue #15 request mix against one boxd, or one route of it.
--
--   wrk ... -s scripts/load/mix.lua -- TOKEN            the mix (weights below)
--   wrk ... -s scripts/load/mix.lua -- TOKEN ROUTE      only ROUTE (a per-route latency probe)
--
-- The workspace must hold load/read-0.txt .. load/read-15.txt (scripts/load.sh writes them).
-- At the end one line is printed, starting with $LOAD_LABEL (default "mix"), then key=value pairs:
-- req_s, p50_ms, p99_ms, max_ms, requests, non2xx (status:count,...), socket errors, tool_errors
-- (2xx tool results with isError true).

local FILES = 16

-- Globals, not locals: done() reads them from each thread with thread:get.
statuses = {}
tool_errors = 0

-- wrk.format uses wrk.headers only when given no headers; every request carries the token.
local function format(method, path, body)
  local headers = { ["Authorization"] = wrk.headers["Authorization"] }
  if body then
    headers["Content-Type"] = "application/json"
  end
  return wrk.format(method, path, headers, body)
end

-- Route name, weight in percent, and a function building its request for a given counter.
local routes = {
  { "healthz", 40, function(_) return format("GET", "/healthz") end },
  { "read", 24, function(n)
      return format("GET", "/workspace/file?path=load/read-" .. (n % FILES) .. ".txt")
    end },
  { "shell", 10, function(_)
      return format("POST", "/tools/run_shell_command", '{"command":"echo load"}')
    end },
  { "list", 8, function(_) return format("GET", "/workspace/list?path=load") end },
  { "exists", 8, function(n)
      return format("GET", "/workspace/exists?path=load/read-" .. (n % FILES) .. ".txt")
    end },
  { "put", 6, nil },
  { "cell", 4, function(_)
      return format("POST", "/tools/run_ipython_cell", '{"code":"1+1"}')
    end },
}

local put_body = string.rep("x", 1023) .. "\n"

local threads = {}
local thread_count = 0

function setup(thread)
  thread_count = thread_count + 1
  thread:set("id", thread_count)
  table.insert(threads, thread)
end

local wheel = {}
local counter = 0

function init(args)
  local token = args[1] or ""
  local only = args[2]
  local label = os.getenv("LOAD_LABEL") or "mix"
  wrk.headers["Authorization"] = "Bearer " .. token
  math.randomseed(os.time() + (id or 0) * 7919)
  routes[6][3] = function(n)
    -- Each run and thread writes its own files (connections of one thread may meet on one).
    return wrk.format("PUT", "/workspace/file?path=load/put-" .. label .. "-" .. (id or 0) .. "-" .. (n % FILES) .. ".txt",
      { ["Authorization"] = wrk.headers["Authorization"], ["Content-Type"] = "application/octet-stream" },
      put_body)
  end
  for _, route in ipairs(routes) do
    if only == nil or only == route[1] then
      local weight = only and 1 or route[2]
      for _ = 1, weight do
        table.insert(wheel, route[3])
      end
    end
  end
  if #wheel == 0 then
    error("unknown route " .. tostring(only))
  end
end

function request()
  counter = counter + 1
  return wheel[math.random(#wheel)](counter)
end

function response(status, _, body)
  if status < 200 or status > 299 then
    statuses[status] = (statuses[status] or 0) + 1
  elseif body and string.find(body, '"isError":true', 1, true) then
    tool_errors = tool_errors + 1
  end
end

function done(summary, latency, _)
  local non2xx = {}
  local errors = 0
  for _, thread in ipairs(threads) do
    local counts = thread:get("statuses") or {}
    for status, count in pairs(counts) do
      non2xx[status] = (non2xx[status] or 0) + count
    end
    errors = errors + (thread:get("tool_errors") or 0)
  end
  local codes = {}
  for status, count in pairs(non2xx) do
    table.insert(codes, status .. ":" .. count)
  end
  table.sort(codes)
  local e = summary.errors
  local seconds = summary.duration / 1e6
  io.write(string.format(
    "%s req_s=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.1f requests=%d non2xx=%s "
      .. "socket_errors=connect:%d,read:%d,write:%d,timeout:%d tool_errors=%d\n",
    os.getenv("LOAD_LABEL") or "mix", summary.requests / seconds, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, summary.requests,
    #codes > 0 and table.concat(codes, ",") or "none", e.connect, e.read, e.write, e.timeout, errors))
end
