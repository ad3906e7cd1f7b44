-- wrk script: every request submits one container (no GPUs) to `tessera serve`.
-- The token comes from the environment: TESSERA_TOKEN=... wrk -s submit.lua URL
-- (wrk counts answers other than 2xx/3xx itself: "Non-2xx or 3xx responses").
wrk.method = "POST"
wrk.path = "/v1/containers"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("TESSERA_TOKEN") or "")
wrk.body = '{"image":"busybox","tenancy":"bench","command":["true"]}'
