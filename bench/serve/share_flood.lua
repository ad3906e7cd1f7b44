-- wrk script: every request submits one share of a GPU (10Gi, 10 %, time-sliced) of tenancy
-- "flood" to `tessera serve`, as a tenancy flooding the shares would.
-- TESSERA_TOKEN=... wrk -s share_flood.lua URL
wrk.method = "POST"
wrk.path = "/v1/containers"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("TESSERA_TOKEN") or "")
wrk.body = '{"image":"busybox","tenancy":"flood","share":{"memory":"10Gi","compute":10,"mode":"timeslice"}}'
