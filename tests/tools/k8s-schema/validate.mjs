#!/usr/bin/env node
// Validates Kubernetes objects strictly against current API schemas.
//
// Built-in kinds: the OpenAPI validation of the npm package kubernetes-models (5.x, current
// Kubernetes API types, resource.k8s.io/v1 included), found from apiVersion/kind alone, so a new
// built-in kind needs no change here. The published schemas do not forbid unknown fields (the
// API server prunes or rejects them), so this tool does: every object is handed to the schema
// validator behind a Proxy that records which fields the validator reads; a field it never read
// is not in the schema and is reported. An object of which no field is read is free-form in the
// schema (RawExtension, JSON) and is left alone.
// Custom resources: the openAPIV3Schema of their CRD (from --crds), structurally: types,
// required, enum, patterns, bounds, and unknown fields rejected unless the schema preserves them.
//
// usage: node validate.mjs [--crds DIR]... FILE|-...
//   FILE: a JSON object, a JSON array, JSON lines, a v1 List, or YAML documents (YAML is turned
//   into JSON by /usr/bin/python3 with python3-yaml). "-" reads JSON from stdin.
// Prints "FILE: ok Kind/name" or "FILE: INVALID Kind/name: problem" per object; exit 1 when any
// is invalid, 2 on a usage or load error.
// The kubernetes-models install is found at $TESSERA_K8S_MODELS (default
// /opt/tessera-tools/k8s-schema/node_modules, where scripts/setup.sh puts it).
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const MODELS = process.env.TESSERA_K8S_MODELS || "/opt/tessera-tools/k8s-schema/node_modules";
const NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

// Fields the API has but kubernetes-models' schemas lost (its generator drops every key named
// "description" and JSONSchemaProps' x-kubernetes-* keys; found by comparing the package's .d.ts
// interfaces with its schemas). Accepted by name, only within these kinds.
const SCHEMA_GAPS = {
  "apiextensions.k8s.io/v1 CustomResourceDefinition": [
    "description", "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys", "x-kubernetes-list-type", "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-validations",
  ],
  "scheduling.k8s.io/v1 PriorityClass": ["description"],
};

// ---- loading -------------------------------------------------------------------------------

function yamlToJson(path) {
  const script =
    "import json, sys, yaml\n" +
    "with open(sys.argv[1]) as f:\n" +
    "    print(json.dumps([d for d in yaml.safe_load_all(f) if d is not None]))\n";
  return JSON.parse(execFileSync("/usr/bin/python3", ["-c", script, path], { encoding: "utf8" }));
}

function parseJsonText(text) {
  const trimmed = text.trim();
  if (!trimmed) return [];
  try {
    const data = JSON.parse(trimmed);
    return Array.isArray(data) ? data : [data];
  } catch {
    return trimmed.split("\n").filter((line) => line.trim()).map((line) => JSON.parse(line));
  }
}

// Objects in a file; a v1 List contributes its items.
function loadObjects(path) {
  let objects;
  if (path === "-") {
    objects = parseJsonText(readFileSync(0, "utf8"));
  } else {
    const text = readFileSync(path, "utf8");
    const start = text.trimStart()[0];
    objects = start === "{" || start === "[" ? parseJsonText(text) : yamlToJson(path);
  }
  return objects.flatMap((o) => (o && o.kind === "List" && Array.isArray(o.items) ? o.items : [o]));
}

function loadCrds(dirs) {
  const schemas = new Map(); // "group/version Kind" -> {schema, scope}
  for (const dir of dirs) {
    for (const file of readdirSync(dir).sort()) {
      if (!/\.(ya?ml|json)$/.test(file)) continue;
      for (const doc of loadObjects(join(dir, file))) {
        if (!doc || doc.kind !== "CustomResourceDefinition") continue;
        for (const version of doc.spec.versions) {
          schemas.set(`${doc.spec.group}/${version.name} ${doc.spec.names.kind}`, {
            schema: version.schema.openAPIV3Schema,
            scope: doc.spec.scope,
          });
        }
      }
    }
  }
  return schemas;
}

// ---- built-in kinds: kubernetes-models ---------------------------------------------------------

const modelCache = new Map();

// The model class of apiVersion/kind: kubernetes-models/<group>/<version>/<Kind>.js, the core
// group under v1/. Returns null when the package has no such kind.
async function modelFor(apiVersion, kind) {
  const key = `${apiVersion} ${kind}`;
  if (modelCache.has(key)) return modelCache.get(key);
  let model = null;
  if (typeof apiVersion === "string" && typeof kind === "string" && /^[A-Za-z0-9]+$/.test(kind) &&
      /^[a-z0-9.-]+(\/[a-z0-9]+)?$/.test(apiVersion)) {
    const file = join(MODELS, "kubernetes-models", ...apiVersion.split("/"), `${kind}.js`);
    if (existsSync(file)) {
      const module = await import(pathToFileURL(file).href);
      const candidate = module[kind];
      if (candidate && candidate.apiVersion === apiVersion && candidate.kind === kind) model = candidate;
    }
  }
  modelCache.set(key, model);
  return model;
}

// A copy of `value` whose objects record the fields read from them into `records`.
function tracked(value, path, records) {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((item, i) => tracked(item, `${path}[${i}]`, records));
  const record = { path, keys: Object.keys(value), read: new Set() };
  records.push(record);
  const copy = {};
  for (const [k, v] of Object.entries(value)) copy[k] = tracked(v, `${path}.${k}`, records);
  return new Proxy(copy, {
    get(target, property, receiver) {
      if (typeof property === "string") record.read.add(property);
      return Reflect.get(target, property, receiver);
    },
    has(target, property) {
      if (typeof property === "string") record.read.add(property);
      return Reflect.has(target, property);
    },
  });
}

function jsonPointerToPath(pointer) {
  return pointer.replace(/\/(\d+)(?=\/|$)/g, "[$1]").replaceAll("/", ".");
}

// Errors of `value` against `model`'s schema, then its fields the schema does not know (`gaps`:
// names accepted anyway). `path` prefixes the messages.
function validateModel(value, model, path, gaps = new Set()) {
  const records = [];
  const proxy = tracked(value, path, records);
  try {
    model.prototype.validate.call(proxy);
  } catch (e) {
    const errors = e.errors || [{ instancePath: "", message: e.message }];
    return errors.map((err) => `${path}${jsonPointerToPath(err.instancePath)}: ${err.message}`);
  }
  const errors = [];
  for (const record of records) {
    if (record.read.size === 0) continue; // free-form in the schema
    for (const key of record.keys) {
      if (!record.read.has(key) && !gaps.has(key)) errors.push(`${record.path}.${key}: unknown field`);
    }
  }
  return errors;
}

function validateBuiltIn(obj, model) {
  return validateModel(obj, model, obj.kind, new Set(SCHEMA_GAPS[`${obj.apiVersion} ${obj.kind}`] || []));
}

// ---- custom resources: their CRD's openAPIV3Schema ---------------------------------------------

function typeOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (Number.isInteger(value)) return "integer";
  return typeof value; // "object" | "string" | "number" | "boolean"
}

function checkSchema(value, schema, path, errors) {
  if (!schema || schema["x-kubernetes-preserve-unknown-fields"] && !schema.properties) return;
  if (value === null) {
    if (!schema.nullable) errors.push(`${path}: null`);
    return;
  }
  if (schema["x-kubernetes-int-or-string"]) {
    if (!["integer", "string"].includes(typeOf(value))) errors.push(`${path}: want int or string`);
    return;
  }
  const actual = typeOf(value);
  const want = schema.type;
  if (want && !(want === actual || (want === "number" && actual === "integer"))) {
    errors.push(`${path}: want ${want}, got ${actual}`);
    return;
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value)))
    errors.push(`${path}: ${JSON.stringify(value)} not in ${JSON.stringify(schema.enum)}`);
  if (actual === "string") {
    if (schema.pattern && !new RegExp(schema.pattern, "u").test(value))
      errors.push(`${path}: does not match ${schema.pattern}`);
    if (schema.maxLength !== undefined && value.length > schema.maxLength) errors.push(`${path}: too long`);
    if (schema.minLength !== undefined && value.length < schema.minLength) errors.push(`${path}: too short`);
  }
  if (actual === "integer" || actual === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) errors.push(`${path}: below ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) errors.push(`${path}: above ${schema.maximum}`);
  }
  if (actual === "array") {
    if (schema.maxItems !== undefined && value.length > schema.maxItems) errors.push(`${path}: too many items`);
    if (schema.minItems !== undefined && value.length < schema.minItems) errors.push(`${path}: too few items`);
    value.forEach((item, i) => checkSchema(item, schema.items, `${path}[${i}]`, errors));
  }
  if (actual === "object") {
    for (const name of schema.required || [])
      if (!(name in value)) errors.push(`${path}.${name}: required`);
    const properties = schema.properties || {};
    for (const [k, v] of Object.entries(value)) {
      if (k in properties) checkSchema(v, properties[k], `${path}.${k}`, errors);
      else if (schema.additionalProperties && typeof schema.additionalProperties === "object")
        checkSchema(v, schema.additionalProperties, `${path}.${k}`, errors);
      else if (!schema["x-kubernetes-preserve-unknown-fields"] && schema.additionalProperties !== true &&
               !(path === "" && ["apiVersion", "kind", "metadata"].includes(k)))
        errors.push(`${path}.${k}: unknown field`);
    }
  }
}

// metadata of a custom resource is ObjectMeta, checked by the API server, not by the CRD schema.
async function objectMetaModel() {
  const file = join(MODELS, "@kubernetes-models", "apimachinery", "apis", "meta", "v1", "ObjectMeta.js");
  return (await import(pathToFileURL(file).href)).ObjectMeta;
}

async function validateCustom(obj, crd) {
  const errors = [];
  const { metadata, ...rest } = obj;
  checkSchema(rest, crd.schema, "", errors);
  if (metadata !== undefined) {
    errors.push(...validateModel(metadata, await objectMetaModel(), `${obj.kind}.metadata`));
  }
  const namespace = obj.metadata && obj.metadata.namespace;
  if (crd.scope === "Cluster" && namespace) errors.push("metadata.namespace set on a cluster-scoped resource");
  if (crd.scope === "Namespaced" && !namespace) errors.push("metadata.namespace missing on a namespaced resource");
  return errors.map((e) => (e.startsWith(`${obj.kind}.`) ? e : `${obj.kind}${e}`));
}

// ---- one object --------------------------------------------------------------------------------

async function validate(obj, crds) {
  if (typeOf(obj) !== "object") return ["not an object"];
  const errors = [];
  const model = await modelFor(obj.apiVersion, obj.kind);
  const crd = crds.get(`${obj.apiVersion} ${obj.kind}`);
  if (model) errors.push(...validateBuiltIn(obj, model));
  else if (crd) errors.push(...(await validateCustom(obj, crd)));
  else errors.push(`no schema for ${obj.apiVersion} ${obj.kind} (neither kubernetes-models nor --crds)`);
  const name = obj.metadata && obj.metadata.name;
  if (!name) errors.push("metadata.name missing");
  else if (typeof name !== "string" || name.length > 253 || !NAME.test(name))
    errors.push(`metadata.name ${JSON.stringify(name)} is not a DNS-1123 subdomain`);
  if (obj.kind === "CustomResourceDefinition" && model) {
    // The schema of each version is itself checked by the rules above when an object uses it;
    // here only that it is there and structural at the root.
    for (const version of (obj.spec && obj.spec.versions) || []) {
      const schema = version.schema && version.schema.openAPIV3Schema;
      if (!schema || schema.type !== "object")
        errors.push(`CustomResourceDefinition version ${version.name}: openAPIV3Schema must be type object`);
    }
  }
  return errors;
}

async function main() {
  const args = process.argv.slice(2);
  const crdDirs = [];
  const files = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--crds") crdDirs.push(args[++i]);
    else files.push(args[i]);
  }
  if (files.length === 0 || crdDirs.includes(undefined)) {
    console.error("usage: validate.mjs [--crds DIR]... FILE|-...");
    process.exit(2);
  }
  if (!existsSync(join(MODELS, "kubernetes-models", "package.json"))) {
    console.error(`kubernetes-models not found under ${MODELS} (run scripts/setup.sh)`);
    process.exit(2);
  }
  const crds = loadCrds(crdDirs);
  let bad = 0;
  for (const file of files) {
    for (const obj of loadObjects(file)) {
      const label = typeOf(obj) === "object" ? `${obj.kind}/${obj.metadata && obj.metadata.name}` : "?";
      const errors = await validate(obj, crds);
      if (errors.length) {
        bad++;
        for (const e of errors) console.log(`${file}: INVALID ${label}: ${e}`);
      } else {
        console.log(`${file}: ok ${label}`);
      }
    }
  }
  process.exit(bad ? 1 : 0);
}

main().catch((e) => {
  console.error(`validate.mjs: ${e.message}`);
  process.exit(2);
});
