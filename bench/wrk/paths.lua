-- wrk script: rotates over request paths read from $PATHS_FILE (one per
-- line), each thread from its own starting point, and prints one JSON line
-- with the figures when done.
local paths = {}
for line in io.lines(os.getenv("PATHS_FILE")) do
  if line ~= "" then paths[#paths + 1] = line end
end
local counter = 0

setup = function(thread)
  counter = counter + 1
  thread:set("offset", counter * 7919)
end

init = function(args)
  i = offset or 0
end

request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"socket_errors":%d,"non2xx":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
