// The OpenAPI 3.0 description of every endpoint, served at GET /v1/openapi.json: the document
// in data/openapi.json, with the token endpoints and every operation's scopes (x-tessera-scopes)
// added from the tables below.
#include <nlohmann/json.hpp>

#include "api/api.h"

namespace tessera::api {
namespace {

using nlohmann::json;

// The schemas of a token and of a token request.
void AddTokenSchemas(json& doc) {
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
}

// A token request's body, and the answer that creates a token.
json TokenRequestBody() {
  return {{"content",
           {{"application/json", {{"schema", {{"$ref", "#/components/schemas/TokenBody"}}}}}}}};
}

json TokenCreatedResponses() {
  return {{"201",
           {{"description", "Created"},
            {"content",
             {{"application/json", {{"schema", {{"$ref", "#/components/schemas/Token"}}}}}}}}},
          {"400", {{"$ref", "#/components/responses/BadRequest"}}},
          {"403", {{"$ref", "#/components/responses/Forbidden"}}}};
}

// GET and POST /v1/tokens: every token listed, a metrics token made.
void AddTokensEndpoint(json& doc) {
  const json error = {{"$ref", "#/components/responses/Forbidden"}};
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
                    {"requestBody", TokenRequestBody()},
                    {"responses", TokenCreatedResponses()}};
}

// DELETE /v1/tokens/{id} and POST /v1/admin-token:rotate.
void AddRevokeAndRotate(json& doc) {
  const json error = {{"$ref", "#/components/responses/Forbidden"}};
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

// The token endpoints and the token schemas.
void AddTokenEndpoints(json& doc) {
  AddTokenSchemas(doc);
  json& tenancy_tokens = doc["paths"]["/v1/tenancies/{name}/tokens"]["post"];
  tenancy_tokens["summary"] =
      "Admin: a token for the tenancy's current incarnation, tenant (default) or read-only, with "
      "an optional expiry; the secret is shown once";
  tenancy_tokens["requestBody"] = TokenRequestBody();
  tenancy_tokens["responses"].update(TokenCreatedResponses());
  AddTokensEndpoint(doc);
  AddRevokeAndRotate(doc);
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
    {"/v1/gpus/{id}", "get", {"admin", "tenant", "read-only"}},
    {"/v1/leases", "get", {"admin", "tenant", "read-only"}},
    {"/v1/gpus/{id}/{action}", "post", {"admin"}},
    {"/v1/audit", "get", {"admin"}},
};

std::string BuildDocument() {
  json doc = json::parse(OpenApiBaseDocument());
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
