-- wrk script: every request submits one 1-GPU container of tenancy "flood" to `tessera serve`,
-- as a tenancy flooding the queue would. TESSERA_TOKEN=... wrk -s flood.lua URL
wrk.method = "POST"
wrk.path = "/v1/containers"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("TESSERA_TOKEN") or "")
wrk.body = '{"image":"busybox","tenancy":"flood","gpus":1}'
