// The OpenAPI 3.0 description of every endpoint, served at GET /v1/openapi.json: the document
// below, with the token endpoints and every operation's scopes (x-tessera-scopes) added from the
// tables after it.
#include <nlohmann/json.hpp>

#include "api/api.h"

namespace tessera::api {
namespace {

const std::string& BaseDocument() {
  static const std::string kDocument = R"json({
  "openapi": "3.0.3",
  "info": {
    "title": "tessera serve",
    "version": "1",
    "description": "GPU containers as a service on one host: tenancies, containers, GPU leases with firmware checks. Authenticate with 'Authorization: Bearer <token>': the admin token (written to <data-dir>/admin.token at first start) or a tenancy token (POST /v1/tenancies/{name}/tokens). A tenancy token sees only its own tenancy; other tenancies' objects answer 404. Errors are {\"error\":{\"code\",\"message\"}}; a 400 message starts with the field it is about."
  },
  "components": {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    "schemas": {
      "Error": {"type": "object", "properties": {"error": {"type": "object", "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}},
      "TenancyBody": {"type": "object", "additionalProperties": false, "properties": {
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "extensions": {"type": "object", "description": "Entitlements attached by other components (networks, volumes): key -> any JSON; 'scheduling' is set through quota, weight and maxPriority"},
        "quota": {"$ref": "#/components/schemas/Quota"},
        "weight": {"type": "number", "minimum": 0.001, "maximum": 1000, "default": 1, "description": "Fair share of the fleet's GPUs in proportion to weight, on recent usage (tessera serve --fair-share-half-life)"},
        "maxPriority": {"type": "integer", "minimum": -1000, "maximum": 1000, "default": 0, "description": "Highest priority its submissions may ask for"}},
        "description": "Any of quota, weight, maxPriority sets the whole scheduling policy (the others at their defaults); a body with none keeps the stored one"},
      "Quota": {"type": "object", "additionalProperties": false, "properties": {
        "gpus": {"type": "integer", "minimum": 0, "maximum": 1000000, "nullable": true, "description": "GPUs in use at once; null: unlimited"},
        "pending": {"type": "integer", "minimum": 0, "maximum": 1000000, "nullable": true, "description": "GPU containers waiting at once; over it a submission is 429 naming the quota; null: unlimited; left out: the operator's default (tessera serve --default-pending-quota, 10000)"}}},
      "Tenancy": {"type": "object", "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"}, "uid": {"type": "string", "description": "This incarnation of the name: new each time the name is created"}, "created_ms": {"type": "integer"}, "labels": {"type": "object"}, "extensions": {"type": "object"}, "quota": {"$ref": "#/components/schemas/Quota"}, "weight": {"type": "number"}, "maxPriority": {"type": "integer"}}},
      "ContainerSpec": {"type": "object", "additionalProperties": false, "required": ["image", "tenancy"], "properties": {
        "image": {"type": "string"},
        "tenancy": {"type": "string", "description": "Created when it does not exist (admin token)"},
        "gpus": {"type": "integer", "minimum": 0, "maximum": 8, "default": 0},
        "mig": {"$ref": "#/components/schemas/MigRequest"},
        "share": {"$ref": "#/components/schemas/ShareRequest"},
        "isolation": {"type": "string", "enum": ["runc", "gvisor", "kata"], "default": "runc"},
        "command": {"type": "array", "items": {"type": "string"}},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "network": {"type": "string", "enum": ["tenancy", "none"], "default": "tenancy", "description": "tenancy: the tenancy's own network (no egress; other tenancies unreachable); none: loopback only"},
        "volumes": {"type": "array", "maxItems": 32, "items": {"$ref": "#/components/schemas/VolumeRequest"}, "description": "NFS exports the tenancy is entitled to; any other name is 403 naming the volume"},
        "priority": {"type": "integer", "minimum": -1000, "maximum": 1000, "default": 0, "description": "Order among the tenancy's own pending containers; above the tenancy's maxPriority is 403"},
        "maxDurationSeconds": {"type": "integer", "minimum": 1, "maximum": 31622400, "description": "The service stops it at this limit (reason names it); only containers with a limit may run in GPUs reserved for a larger request"},
        "preemptible": {"type": "boolean", "default": false, "description": "It may be stopped (reason 'preempted') for a higher-priority or under-share tenancy's request (tessera serve --preemption)"}}},
      "MigRequest": {"type": "object", "additionalProperties": false, "required": ["profile", "count"], "description": "MIG devices of one profile instead of gpus (isolation runc only); placed on GPUs already in MIG mode", "properties": {
        "profile": {"type": "string", "maxLength": 32, "pattern": "^([1-9][0-9]?c\\.)?[1-9][0-9]?g\\.[1-9][0-9]{0,3}gb([+-][a-z][a-z.]{0,15})?$", "description": "MIG profile name, e.g. 1g.10gb"},
        "count": {"type": "integer", "minimum": 1, "maximum": 56}}},
      "ShareRequest": {"type": "object", "additionalProperties": false, "required": ["memory", "compute"], "description": "A share of one GPU instead of gpus or mig (isolation runc, or gvisor whose nvproxy carries MPS): never overcommitted (a GPU's shares add up to at most its memory less --share-reserve, and 100% of its compute); by default a shared GPU holds one tenancy's containers only", "properties": {
        "memory": {"type": "string", "maxLength": 24, "description": "Kubernetes quantity, 256Mi..4Ti: 20Gi, 1.5Gi, 16G"},
        "compute": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Percent of the GPU's SMs (MPS: the active thread percentage)"},
        "mode": {"type": "string", "enum": ["mps", "timeslice"], "default": "mps", "description": "mps: limits held by the driver (enforcement driver); timeslice: by the watchdog only (enforcement watchdog, or none without one)"}}},
      "VolumeRequest": {"type": "object", "additionalProperties": false, "required": ["name", "mountPath"], "properties": {
        "name": {"type": "string", "description": "An export name from the tenancy's storage entitlements"},
        "mountPath": {"type": "string", "description": "Absolute; no '.', '..', empty components, ':' or ','; not /, /dev, /proc, /sys or below"},
        "readOnly": {"type": "boolean", "description": "Default: the export's mode; false on a read-only export is 403"}}},
      "StorageEntitlements": {"type": "object", "additionalProperties": false, "properties": {
        "nfs": {"type": "array", "maxItems": 64, "items": {"$ref": "#/components/schemas/NfsExport"}}}},
      "NfsExport": {"type": "object", "additionalProperties": false, "required": ["name", "server", "path"], "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"},
        "server": {"type": "string", "description": "Host name, IPv4 or IPv6 address (no brackets)"},
        "path": {"type": "string", "description": "Absolute export path on the server"},
        "port": {"type": "integer", "minimum": 1, "maximum": 65535, "description": "Default 2049"},
        "readOnly": {"type": "boolean", "default": false}}},
      "Container": {"type": "object", "properties": {
        "id": {"type": "string"}, "tenancy": {"type": "string"}, "image": {"type": "string"},
        "command": {"type": "array", "items": {"type": "string"}}, "env": {"type": "object"},
        "isolation": {"type": "string"}, "gpus_requested": {"type": "integer"},
        "gpus": {"type": "array", "items": {"type": "string"}, "description": "IDs of the GPUs held (Gpu.id)"},
        "state": {"type": "string", "enum": ["pending", "running", "exited", "failed"]},
        "exit_code": {"type": "integer", "nullable": true}, "reason": {"type": "string", "description": "Why it failed or was stopped; while pending, why it waits ('waiting: tenancy quota 8/8 GPUs in use')"},
        "queue_position": {"type": "integer", "description": "Pending GPU containers: place in dispatch order (1 is next)"},
        "priority": {"type": "integer"}, "maxDurationSeconds": {"type": "integer", "nullable": true}, "preemptible": {"type": "boolean"},
        "mig": {"allOf": [{"$ref": "#/components/schemas/MigRequest"}], "nullable": true},
        "mig_devices": {"type": "array", "items": {"type": "string"}, "description": "MIG requests: the MIG devices held (their UUIDs); their parent GPUs are in gpus"},
        "mig_gpus": {"type": "number", "description": "MIG requests: what the slices are metered as, in GPUs (compute slices over the board's)"},
        "share": {"type": "object", "nullable": true, "description": "Share requests: memory (canonical quantity), memory_bytes, compute, mode"},
        "share_gpus": {"type": "number", "description": "Share requests: its own part of the bill, in GPUs: max(memory/total, compute/100), a time-sliced share's compute counting whole. Where the GPU takes no other tenancy's work (the default) its tenancy pays the whole GPU: the rest is billed as the run held-<PCI address> (docs/sharing.md)"},
        "enforcement": {"type": "string", "nullable": true, "enum": ["hardware", "driver", "watchdog", "none"], "description": "What holds its limits: hardware (MIG), driver (MPS memory and thread limits), watchdog (only tessera's watchdog), none; null for whole GPUs"},
        "stop_requested": {"type": "boolean"}, "created_ms": {"type": "integer"},
        "started_ms": {"type": "integer"}, "finished_ms": {"type": "integer"}, "idempotency_key": {"type": "string"},
        "network": {"type": "string", "enum": ["tenancy", "none"]},
        "volumes": {"type": "array", "items": {"$ref": "#/components/schemas/VolumeRequest"}}}},
      "Gpu": {"type": "object", "properties": {
        "id": {"type": "string", "description": "PCI address on this host; <PCI address>@<node> on a Kubernetes node"},
        "node": {"type": "string", "description": "Kubernetes node it is on; empty on this host"},
        "available": {"type": "boolean", "description": "its node publishes it now (false: never placed)"},
        "pci_address": {"type": "string"},
        "index": {"type": "integer"}, "model": {"type": "string"}, "cdi_device": {"type": "string"},
        "state": {"$ref": "#/components/schemas/LeaseState"}, "reason": {"type": "string"},
        "tenancy": {"type": "string"}, "container_id": {"type": "string"},
        "drain_requested": {"type": "boolean"}, "quarantine_requested": {"type": "boolean"},
        "firmware_baseline": {"type": "string", "description": "admin only"}, "updated_ms": {"type": "integer"},
        "memory_bytes": {"type": "integer", "description": "The board's memory (NVML); absent when unknown (never shared)"},
        "shared": {"type": "object", "nullable": true, "description": "A GPU that holds shares: its mode (mps, timeslice), the shares (memory, compute, tenancy, container_id; another tenancy's as (held)), and whether its MPS daemon is healthy (fault: why not; no new shares meanwhile)"}}},
      "Lease": {"type": "object", "properties": {"gpu": {"type": "string"}, "state": {"$ref": "#/components/schemas/LeaseState"}, "reason": {"type": "string"}, "tenancy": {"type": "string"}, "container_id": {"type": "string"},
        "mode": {"type": "string", "enum": ["mig", "mps", "timeslice"], "description": "Fractional leases only: how the GPU is divided"},
        "enforcement": {"type": "string", "enum": ["hardware", "driver", "watchdog", "none"], "description": "Fractional leases only: what holds the limits (hardware: MIG; driver: MPS memory and thread limits; watchdog: only tessera's watchdog; none)"},
        "shares": {"type": "array", "items": {"type": "object"}, "description": "Shared GPUs: each share (memory, compute, mode, tenancy, container_id)"}}},
      "LeaseState": {"type": "string", "enum": ["free", "reserved", "active", "releasing", "checking", "quarantined", "draining"]},
      "AuditRecord": {"type": "object", "description": "One change (or refused request) of the audit trail; never holds a token's secret or hash", "properties": {
        "seq": {"type": "integer", "description": "Increasing, never reused: the cursor of the listing"},
        "time_ms": {"type": "integer"},
        "token_id": {"type": "string", "description": "The caller's token ID; admin for the admin token; service for the service's own actions"},
        "scope": {"type": "string", "enum": ["admin", "tenant", "service"]},
        "action": {"type": "string", "description": "tenancy.put, tenancy.delete, storage.put, token.create, container.create, container.delete, gpu.drain, gpu.undrain, gpu.quarantine, gpu.release (gpu.action for an unknown action); the service's own: container.exit, container.fail, container.stop"},
        "object": {"type": "object", "properties": {"kind": {"type": "string", "enum": ["tenancy", "storage", "token", "container", "gpu"]}, "id": {"type": "string"}}},
        "tenancy": {"type": "string"},
        "result": {"type": "string", "description": "ok, or the refusal's error code (invalid_argument, permission_denied, not_found, ...)"},
        "request_id": {"type": "string", "description": "The X-Request-Id of the request; empty for the service's own actions"},
        "detail": {"type": "string", "description": "A short why: created/updated, the GPU's state, an exit code or stop reason"}}},
      "Token": {"type": "object", "properties": {"id": {"type": "string"}, "tenancy": {"type": "string"}, "token": {"type": "string", "description": "shown once; only its SHA-256 is stored"}, "created_ms": {"type": "integer"}}}
    },
    "responses": {
      "BadRequest": {"description": "Bad body or parameter; the message names the field", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Unauthorized": {"description": "Missing or unknown token", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Forbidden": {"description": "Needs the admin token", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "NotFound": {"description": "Not found (or another tenancy's)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Conflict": {"description": "Cannot be done in the current state (e.g. isolation runtime not installed, Idempotency-Key reused with another body)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    }
  },
  "security": [{"bearer": []}],
  "paths": {
    "/v1/openapi.json": {"get": {"summary": "This document", "security": [], "responses": {"200": {"description": "OpenAPI 3 document"}}}},
    "/metrics": {"get": {"summary": "Prometheus metrics: GPUs by lease state, containers by state, tessera_tenancy_gpu_seconds_total{tenancy,uid} and tessera_queue_wait_seconds{tenancy,uid} (histogram) per existing tenancy incarnation, tessera_scheduling_passes_total, tessera_queue_reports_total, tessera_store_write_failing, request latency histograms, with --fabric-manager tessera_fabric_manager_restarts_total and tessera_fabric_partition_* counters; with telemetry on (embedded mode) this host's GPUs and containers under dcgm-exporter's names and labels (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_POWER_USAGE, DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, DCGM_FI_DEV_GPU_TEMP, ...; gpu, UUID, pci_bus_id, device, modelName, Hostname, pod, namespace, container), capped by --telemetry-max-series with the rest in container=\"_other\", and per tenancy tessera_tenancy_{sm_utilization,gpu_memory_bytes,sm_seconds_total,memory_gib_seconds_total,energy_joules_total}{tenancy,gpu_model,mode}. No endpoint takes query parameters but GET /v1/containers, GET /v1/tenancies/{name}/usage GET /v1/dashboard and GET /v1/audit: any other is 400. Every answer carries an X-Request-Id the service generated (a caller's own is never echoed)", "security": [], "responses": {"200": {"description": "text/plain; version=0.0.4"}}}},
    "/": {"get": {"summary": "Dashboard (HTML)", "security": [], "responses": {"200": {"description": "text/html"}}}},
    "/v1/tenancies": {"get": {"summary": "List tenancies (a tenancy token sees its own)", "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object", "properties": {"tenancies": {"type": "array", "items": {"$ref": "#/components/schemas/Tenancy"}}}}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}}}},
    "/v1/tenancies/{name}": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
      "get": {"summary": "Get a tenancy", "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Tenancy"}}}}, "404": {"$ref": "#/components/responses/NotFound"}}},
      "delete": {"summary": "Admin: delete a tenancy that has no container left running or pending (409 otherwise). Its ended containers are removed from the runtime (their logs go with them), then its network and NFS volumes, then the tenancy and its tokens; container records stay", "responses": {"200": {"description": "Deleted"}, "403": {"$ref": "#/components/responses/Forbidden"}, "404": {"$ref": "#/components/responses/NotFound"}, "409": {"$ref": "#/components/responses/Conflict"}}},
      "put": {"summary": "Admin: create or update a tenancy (labels and extensions are admin metadata, entitlements included; a tenancy token gets 403). Names are DNS labels: 1-63 of [a-z0-9-], starting and ending with a letter or digit. With the local backend this also creates the tenancy's podman network (tessera-t-<name>). A name deleted and created again is a new tenancy (new uid) that sees nothing of the old one", "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/TenancyBody"}}}}, "responses": {"200": {"description": "Stored", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Tenancy"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "403": {"$ref": "#/components/responses/Forbidden"}}}},
    "/v1/tenancies/{name}/storage": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
      "get": {"summary": "The tenancy's storage entitlements (admin, or the tenancy's own token)", "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StorageEntitlements"}}}}, "404": {"$ref": "#/components/responses/NotFound"}}},
      "put": {"summary": "Admin: replace the NFS exports the tenancy may mount (creates the tenancy when missing). The host's podman volumes follow: one per export (local driver, type=nfs), removed when an export is withdrawn", "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StorageEntitlements"}}}}, "responses": {"200": {"description": "Stored", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StorageEntitlements"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "403": {"$ref": "#/components/responses/Forbidden"}, "503": {"description": "Stored, but the backend could not create the network or volumes; repeat the PUT", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}}},
    "/v1/tenancies/{name}/usage": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
      "get": {"summary": "Metered GPU-seconds of the tenancy's runs within [from, to): every run that held GPUs (gpus x time from its start to the end its runtime reports; one record per run, never replaced; nothing for a run that never started), durable across restarts; the admin (every incarnation of the name) or the tenancy's own token (its incarnation). Next to them what the runs were measured to use (sm_seconds, memory_gib_seconds, energy_joules; absent: not measured)",
        "parameters": [{"name": "from", "in": "query", "schema": {"type": "integer", "minimum": 0}, "description": "Unix time, seconds (default 0)"}, {"name": "to", "in": "query", "schema": {"type": "integer", "minimum": 0}, "description": "Unix time, seconds (default now); a from after to, or after now without to, is 400"}, {"name": "step", "in": "query", "schema": {"type": "integer", "minimum": 60, "maximum": 86400}, "description": "Seconds per bucket of series (at most 1440 buckets in the window)"}],
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object", "properties": {"tenancy": {"type": "string"}, "from_ms": {"type": "integer"}, "to_ms": {"type": "integer"}, "gpu_seconds": {"type": "number"}, "containers_total": {"type": "integer"}, "containers": {"type": "array", "maxItems": 1000, "items": {"type": "object", "properties": {"id": {"type": "string"}, "gpus": {"type": "integer"}, "started_ms": {"type": "integer"}, "finished_ms": {"type": "integer", "nullable": true, "description": "null: still running"}, "gpu_seconds": {"type": "number", "description": "within the window"}}}}, "step_s": {"type": "integer"}, "series": {"type": "array", "description": "With step: the window's buckets, oldest first", "items": {"type": "object", "properties": {"start_ms": {"type": "integer"}, "gpu_seconds": {"type": "number"}}}}}}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "404": {"$ref": "#/components/responses/NotFound"}}}},
    "/v1/tenancies/{name}/tokens": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
      "post": {"summary": "Create a token for the tenancy (admin)", "responses": {"201": {"description": "Created", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Token"}}}}, "403": {"$ref": "#/components/responses/Forbidden"}, "404": {"$ref": "#/components/responses/NotFound"}}}},
    "/v1/containers": {
      "get": {"summary": "List containers (own tenancy for a tenancy token), one page at a time: pass the response's next as after to get the following page. A page ends at limit records or at about 4 MiB of JSON, whichever comes first. Finished records are kept for a limited time and number (tessera serve --retain-finished, --retain-finished-per-tenancy)",
        "parameters": [{"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 500}},
                       {"name": "after", "in": "query", "required": false, "schema": {"type": "string"}, "description": "The next value of the previous page"},
                       {"name": "order", "in": "query", "required": false, "schema": {"type": "string", "enum": ["asc", "desc"], "default": "asc"}, "description": "Creation order, oldest (asc) or newest (desc) first"},
                       {"name": "state", "in": "query", "required": false, "schema": {"type": "string"}, "description": "Comma-separated states to include: pending, running, exited, failed"},
                       {"name": "tenancy", "in": "query", "required": false, "schema": {"type": "string"}}],
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object", "properties": {"containers": {"type": "array", "items": {"$ref": "#/components/schemas/Container"}}, "next": {"type": "string", "description": "Present when more containers follow"}}}}}}, "400": {"$ref": "#/components/responses/BadRequest"}}},
      "post": {"summary": "Submit a container; answered once the submission is durable",
        "parameters": [{"name": "Idempotency-Key", "in": "header", "required": false, "schema": {"type": "string", "maxLength": 255}, "description": "A retry with the same key and body returns the first submission (header Idempotent-Replayed: true); with another body, 409"}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ContainerSpec"}}}},
        "responses": {"202": {"description": "Accepted", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Container"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "403": {"description": "A volume the tenancy is not entitled to, or read-write on a read-only export (the message names the volume); a priority above the tenancy's maxPriority", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}, "404": {"$ref": "#/components/responses/NotFound"}, "409": {"$ref": "#/components/responses/Conflict"}, "429": {"description": "The tenancy has quota.pending GPU containers waiting already; the message names the quota", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}, "503": {"description": "Not stored: the store cannot write, or the data directory's free space (less what running containers' logs may still grow to) is below --store-reserve; the message says which", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}}},
    "/v1/audit": {"get": {"summary": "Admin: the audit trail, oldest first, one page at a time (pass next as after). One record per change, written in the same store transaction as the change (a refused mutating request: its own record); records older than tessera serve --audit-retention (default 90d) are deleted. A tenancy token gets 403. Kubernetes mode: one ConfigMap per record in the control plane's namespace, written before the change (docs/audit.md)",
      "parameters": [{"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}},
                     {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0}, "description": "The next value of the previous page"},
                     {"name": "tenancy", "in": "query", "schema": {"type": "string"}},
                     {"name": "action", "in": "query", "schema": {"type": "string"}, "description": "e.g. container.create"},
                     {"name": "from", "in": "query", "schema": {"type": "integer", "minimum": 0}, "description": "Unix time, seconds: records at or after"},
                     {"name": "to", "in": "query", "schema": {"type": "integer", "minimum": 0}, "description": "Unix time, seconds: records before; before from is 400"}],
      "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object", "properties": {"records": {"type": "array", "items": {"$ref": "#/components/schemas/AuditRecord"}}, "next": {"type": "integer", "description": "Present when more records follow"}}}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}}}},
    "/v1/telemetry": {"get": {"summary": "This host's last GPU telemetry pass (embedded mode): per GPU its figures (utilisation, memory, power, temperature, energy counter, Xids, MIG instances with GPM SM use), the processes no container of a tenancy owns (unattributed), and per container on it its processes, memory and SM use; a tenancy token sees its own containers only. What `tessera top` shows",
      "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object", "properties": {"time_ms": {"type": "integer"}, "gpus": {"type": "array", "items": {"type": "object"}}}}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}}}},
    "/v1/dashboard": {"get": {"summary": "The dashboard's one document per poll: every GPU the caller sees (lease state, holder, reason, NVLink module, latest telemetry: utilisation, memory, power), grouped by node and NVLink partition (nodes[].groups[].gpus are indices into gpus), each tenancy's share and use, and counts",
      "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object", "properties": {
        "time_ms": {"type": "integer"}, "telemetry_ms": {"type": "integer", "description": "The telemetry pass the gauges come from; 0 without telemetry"},
        "scheduling": {"type": "string"},
        "counts": {"type": "object", "properties": {"gpus": {"type": "object", "additionalProperties": {"type": "integer"}}, "containers": {"type": "object", "additionalProperties": {"type": "integer"}}, "queue": {"type": "integer"}}},
        "nodes": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string", "description": "\"\" for this host"}, "groups": {"type": "array", "items": {"type": "object", "properties": {"label": {"type": "string", "description": "The NVLink partition (P1), \"\" for none"}, "gpus": {"type": "array", "items": {"type": "integer"}}}}}}}},
        "gpus": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "string"}, "node": {"type": "string"}, "pci_address": {"type": "string"}, "model": {"type": "string"}, "module": {"type": "integer"}, "state": {"type": "string"}, "reason": {"type": "string"}, "tenancy": {"type": "string"}, "container_id": {"type": "string"}, "available": {"type": "boolean"}, "drain_requested": {"type": "boolean"}, "quarantine_requested": {"type": "boolean"}, "mig": {"type": "object", "nullable": true}, "util_percent": {"type": "number", "nullable": true, "description": "null for a GPU in MIG mode or without telemetry"}, "memory_used": {"type": "integer", "nullable": true}, "memory_total": {"type": "integer", "nullable": true}, "power_watts": {"type": "number", "nullable": true}, "lost": {"type": "boolean"}}}},
        "tenancies": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "weight": {"type": "number"}, "quota_gpus": {"type": "integer", "nullable": true}, "gpus_in_use": {"type": "integer"}, "mig_gpus_in_use": {"type": "number"}, "pending": {"type": "integer"}, "share": {"type": "number"}, "target_share": {"type": "number"}, "sm_percent": {"type": "number", "description": "Its processes' SM use, percent of one GPU"}, "memory_bytes": {"type": "integer"}, "power_watts": {"type": "number"}}}}}}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}}}},
    "/v1/queue": {"get": {"summary": "Pending GPU containers in dispatch order with why each waits (queue_position is over the whole queue; a tenancy token sees its own entries), and each tenancy's share next to its weight",
      "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object", "properties": {
        "scheduling": {"type": "string", "enum": ["fair", "fifo"]},
        "queue_total": {"type": "integer", "description": "Entries the caller sees; queue lists the first 1000"},
        "queue": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "string"}, "tenancy": {"type": "string"}, "gpus": {"type": "integer"}, "priority": {"type": "integer"}, "queue_position": {"type": "integer"}, "reason": {"type": "string"}, "created_ms": {"type": "integer"}}}},
        "tenancies": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "weight": {"type": "number"}, "quota": {"$ref": "#/components/schemas/Quota"}, "maxPriority": {"type": "integer"}, "gpus_in_use": {"type": "integer"}, "mig_gpus_in_use": {"type": "number", "description": "Its running MIG slices, in GPUs (compute slices over the board's)"}, "pending": {"type": "integer"}, "share": {"type": "number", "description": "Of the fleet's recent GPU usage, 0..1"}, "target_share": {"type": "number", "description": "weight / weights of the tenancies with work, 0..1"}}}}}}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}}}},
    "/v1/containers/{id}": {
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
      "get": {"summary": "Get a container", "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Container"}}}}, "404": {"$ref": "#/components/responses/NotFound"}}},
      "delete": {"summary": "Stop the container and release its GPUs", "responses": {"200": {"description": "Already ended", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Container"}}}}, "202": {"description": "Stopping", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Container"}}}}, "404": {"$ref": "#/components/responses/NotFound"}}}},
    "/v1/containers/{id}/logs": {
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
      "get": {"summary": "Container output (stdout and stderr) as the runtime recorded it. The local backend keeps each container's latest output only, up to --container-log-max (podman empties the log at the cap)", "responses": {"200": {"description": "text/plain"}, "404": {"$ref": "#/components/responses/NotFound"}}}},
    "/v1/gpus": {"get": {"summary": "The host's GPUs with their lease state", "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object", "properties": {"gpus": {"type": "array", "items": {"$ref": "#/components/schemas/Gpu"}}}}}}}}}},
    "/v1/leases": {"get": {"summary": "Lease of every GPU", "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object", "properties": {"leases": {"type": "array", "items": {"$ref": "#/components/schemas/Lease"}}}}}}}}}},
    "/v1/gpus/{id}/{action}": {
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}, "description": "PCI address"},
                     {"name": "action", "in": "path", "required": true, "schema": {"type": "string", "enum": ["drain", "undrain", "quarantine", "release"]}}],
      "post": {"summary": "Admin: drain (free -> draining; a leased GPU drains when its lease ends), undrain, quarantine (a leased GPU is quarantined when its lease ends), release (quarantined/draining -> free with the current firmware as the new baseline; a leased GPU's container is stopped)",
        "requestBody": {"content": {"application/json": {"schema": {"type": "object", "additionalProperties": false, "properties": {"reason": {"type": "string"}}}}}},
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Gpu"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "403": {"$ref": "#/components/responses/Forbidden"}, "404": {"$ref": "#/components/responses/NotFound"}, "409": {"$ref": "#/components/responses/Conflict"}}}}
  }
}
)json";
  return kDocument;
}

using nlohmann::json;

// The token endpoints and the token schemas.
void AddTokenEndpoints(json& doc) {
  const json error = {{"$ref", "#/components/responses/Forbidden"}};
  json& schemas = doc["components"]["schemas"];
  schemas["TokenBody"] = json::parse(R"({"type": "object", "additionalProperties": false,
    "properties": {
      "scope": {"type": "string", "enum": ["tenant", "read-only", "metrics"], "description": "tenant (default under a tenancy): what the tenancy may do; read-only: the tenancy's GET requests only; metrics (POST /v1/tokens only, the default there): GET /metrics only"},
      "expiresInSeconds": {"type": "integer", "minimum": 1, "maximum": 316224000, "description": "Refused from this many seconds after creation on (401); absent: never expires"}}})");
  schemas["Token"] = json::parse(R"({"type": "object", "properties": {
      "id": {"type": "string", "description": "t- and 8 hex digits: listing and revoking"},
      "scope": {"type": "string", "enum": ["tenant", "read-only", "metrics"]},
      "tenancy": {"type": "string", "nullable": true, "description": "null for metrics tokens"},
      "created_ms": {"type": "integer"},
      "last_used_ms": {"type": "integer", "nullable": true, "description": "Last accepted; written to the store at most once a minute, so up to a minute older after a restart"},
      "expires_ms": {"type": "integer", "nullable": true},
      "expired": {"type": "boolean"},
      "token": {"type": "string", "description": "In the creation answer only, shown once; only its SHA-256 is stored"}}})");
  const json created = {
      {"201",
       {{"description", "Created"},
        {"content",
         {{"application/json", {{"schema", {{"$ref", "#/components/schemas/Token"}}}}}}}}},
      {"400", {{"$ref", "#/components/responses/BadRequest"}}},
      {"403", error}};
  const json body = {
      {"content",
       {{"application/json", {{"schema", {{"$ref", "#/components/schemas/TokenBody"}}}}}}}};
  json& tenancy_tokens = doc["paths"]["/v1/tenancies/{name}/tokens"]["post"];
  tenancy_tokens["summary"] =
      "Admin: a token for the tenancy's current incarnation, tenant (default) or read-only, with "
      "an optional expiry; the secret is shown once";
  tenancy_tokens["requestBody"] = body;
  tenancy_tokens["responses"].update(created);
  json& tokens = doc["paths"]["/v1/tokens"];
  tokens["get"] = {
      {"summary",
       "Admin: every token (or one tenancy's), oldest first: ID, scope, tenancy, created, last "
       "used, expiry; never the secret or its hash. The admin token is not listed"},
      {"parameters", json::array({{{"name", "tenancy"},
                                   {"in", "query"},
                                   {"required", false},
                                   {"schema", {{"type", "string"}}}}})},
      {"responses",
       {{"200",
         {{"description", "OK"},
          {"content",
           {{"application/json",
             {{"schema",
               {{"type", "object"},
                {"properties",
                 {{"tokens",
                   {{"type", "array"},
                    {"items", {{"$ref", "#/components/schemas/Token"}}}}}}}}}}}}}}},
        {"403", error}}}};
  tokens["post"] = {{"summary", "Admin: a metrics token (GET /metrics only; no tenancy)"},
                    {"requestBody", body},
                    {"responses", created}};
  doc["paths"]["/v1/tokens/{id}"] = {
      {"parameters", json::array({{{"name", "id"},
                                   {"in", "path"},
                                   {"required", true},
                                   {"schema", {{"type", "string"}}}}})},
      {"delete",
       {{"summary", "Admin: revoke the token; the next request with it is 401"},
        {"responses",
         {{"200",
           {{"description", "Revoked"},
            {"content",
             {{"application/json", {{"schema", {{"$ref", "#/components/schemas/Token"}}}}}}}}},
          {"403", error},
          {"404", {{"$ref", "#/components/responses/NotFound"}}}}}}}};
  doc["paths"]["/v1/admin-token:rotate"]["post"] = {
      {"summary",
       "Admin: a new admin token, written to the admin token file and in force at once; the old "
       "one is 401 from the next request. The new secret is in this answer only. Refused (409) "
       "where replicas share the token through a Secret (Kubernetes mode)"},
      {"responses",
       {{"200",
         {{"description", "Rotated"},
          {"content",
           {{"application/json",
             {{"schema",
               {{"type", "object"},
                {"properties",
                 {{"token", {{"type", "string"}}}, {"scope", {{"type", "string"}}}}}}}}}}}}},
        {"403", error},
        {"409", {{"$ref", "#/components/responses/Conflict"}}}}}};
}

// Who may call each operation (docs/serve.md "Tokens"); every operation of the document is
// listed here (the API's scope table test checks it against the document and the service).
struct OperationScopes {
  const char* path;
  const char* method;
  std::initializer_list<const char*> scopes;  // "public": no token needed
};
const OperationScopes kScopes[] = {
    {"/v1/openapi.json", "get", {"public"}},
    {"/", "get", {"public"}},
    {"/metrics", "get", {"admin", "metrics"}},
    {"/v1/tenancies", "get", {"admin", "tenant", "read-only"}},
    {"/v1/tenancies/{name}", "get", {"admin", "tenant", "read-only"}},
    {"/v1/tenancies/{name}", "put", {"admin"}},
    {"/v1/tenancies/{name}", "delete", {"admin"}},
    {"/v1/tenancies/{name}/storage", "get", {"admin", "tenant", "read-only"}},
    {"/v1/tenancies/{name}/storage", "put", {"admin"}},
    {"/v1/tenancies/{name}/usage", "get", {"admin", "tenant", "read-only"}},
    {"/v1/tenancies/{name}/tokens", "post", {"admin"}},
    {"/v1/tokens", "get", {"admin"}},
    {"/v1/tokens", "post", {"admin"}},
    {"/v1/tokens/{id}", "delete", {"admin"}},
    {"/v1/admin-token:rotate", "post", {"admin"}},
    {"/v1/containers", "get", {"admin", "tenant", "read-only"}},
    {"/v1/containers", "post", {"admin", "tenant"}},
    {"/v1/containers/{id}", "get", {"admin", "tenant", "read-only"}},
    {"/v1/containers/{id}", "delete", {"admin", "tenant"}},
    {"/v1/containers/{id}/logs", "get", {"admin", "tenant", "read-only"}},
    {"/v1/telemetry", "get", {"admin", "tenant", "read-only"}},
    {"/v1/dashboard", "get", {"admin", "tenant", "read-only"}},
    {"/v1/queue", "get", {"admin", "tenant", "read-only"}},
    {"/v1/gpus", "get", {"admin", "tenant", "read-only"}},
    {"/v1/leases", "get", {"admin", "tenant", "read-only"}},
    {"/v1/gpus/{id}/{action}", "post", {"admin"}},
    {"/v1/audit", "get", {"admin"}},
};

std::string BuildDocument() {
  json doc = json::parse(BaseDocument());
  AddTokenEndpoints(doc);
  doc["info"]["description"] =
      doc["info"]["description"].get<std::string>() +
      " Each operation's x-tessera-scopes names the token scopes that may call it (public: no "
      "token); a tenant or read-only token sees its own tenancy's objects only.";
  for (const auto& entry : kScopes) {
    json& operation = doc["paths"][entry.path][entry.method];
    operation["x-tessera-scopes"] = json::array();
    for (const char* scope : entry.scopes)
      operation["x-tessera-scopes"].push_back(scope);
  }
  doc["paths"]["/metrics"]["get"]["description"] =
      "With tessera serve --metrics-aggregate-public a request without a token gets the "
      "aggregate series only: GPUs and containers by state, store, scheduling and request "
      "latency figures; no tenancy, container or GPU labels.";
  return doc.dump(1);
}

}  // namespace

const std::string& OpenApiJson() {
  static const std::string kDocument = BuildDocument();
  return kDocument;
}

}  // namespace tessera::api
