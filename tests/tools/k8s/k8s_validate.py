#!/usr/bin/env python3
"""Validates Kubernetes objects strictly: built-in kinds against Debian's python3-kubernetes
models (every field must be known to the model, with the model's type; required fields present,
checked by deserialising into the model), custom resources against the openAPIV3Schema of their
CRD (tessera's own CRDs, and a Cilium CRD subset) with unknown fields rejected.

usage: k8s_validate.py --crds DIR FILE...   (FILE: JSON object, JSON list, or YAML documents)
Prints one line per object; exit 1 when any object is invalid."""
import argparse
import copy
import glob
import json
import os
import re
import sys

import jsonschema
import yaml
from kubernetes import client

MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "Pod"): "V1Pod",
    ("v1", "Service"): "V1Service",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "PersistentVolume"): "V1PersistentVolume",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("batch/v1", "Job"): "V1Job",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
    ("node.k8s.io/v1", "RuntimeClass"): "V1RuntimeClass",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): "V1CustomResourceDefinition",
}

# Fields typed `object` in the models whose JSON shape is still known.
FREE_FORM = {"object"}


def strict(data, type_name, path, errors):
    if data is None:
        return
    m = re.fullmatch(r"list\[(.*)\]", type_name)
    if m:
        if not isinstance(data, list):
            errors.append(f"{path}: expected a list")
            return
        for i, item in enumerate(data):
            strict(item, m.group(1), f"{path}[{i}]", errors)
        return
    m = re.fullmatch(r"dict\(([^,]*), (.*)\)", type_name)
    if m:
        if not isinstance(data, dict):
            errors.append(f"{path}: expected a map")
            return
        for k, v in data.items():
            strict(v, m.group(2), f"{path}.{k}", errors)
        return
    if type_name == "str":
        if not isinstance(data, str):
            errors.append(f"{path}: expected a string, got {type(data).__name__}")
        return
    if type_name == "int":
        if not isinstance(data, int) or isinstance(data, bool):
            errors.append(f"{path}: expected an integer")
        return
    if type_name == "bool":
        if not isinstance(data, bool):
            errors.append(f"{path}: expected a boolean")
        return
    if type_name in ("float",):
        if not isinstance(data, (int, float)) or isinstance(data, bool):
            errors.append(f"{path}: expected a number")
        return
    if type_name in ("datetime", "date"):
        if not isinstance(data, str):
            errors.append(f"{path}: expected a timestamp string")
        return
    if type_name in FREE_FORM:
        return
    klass = getattr(client, type_name)
    if not isinstance(data, dict):
        errors.append(f"{path}: expected an object ({type_name})")
        return
    by_json = {v: k for k, v in klass.attribute_map.items()}
    for key, value in data.items():
        if key not in by_json:
            errors.append(f"{path}.{key}: unknown field for {type_name}")
            continue
        strict(value, klass.openapi_types[by_json[key]], f"{path}.{key}", errors)


class FakeResponse:
    def __init__(self, data):
        self.data = json.dumps(data)


def deserialize(data, model):
    api = client.ApiClient()
    return api.deserialize(FakeResponse(data), model)


def forbid_unknown(schema):
    """Copies a structural schema with additionalProperties: false on every object that lists
    properties (what the API server's pruning would silently drop, we reject)."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node and \
                    "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(schema)
    return schema


def load_crds(dirs):
    schemas = {}
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.yaml")) + glob.glob(os.path.join(d, "*.json"))):
            with open(path) as f:
                for doc in yaml.safe_load_all(f):
                    if not doc or doc.get("kind") != "CustomResourceDefinition":
                        continue
                    spec = doc["spec"]
                    for version in spec["versions"]:
                        key = (spec["group"] + "/" + version["name"], spec["names"]["kind"])
                        schemas[key] = (forbid_unknown(version["schema"]["openAPIV3Schema"]), spec["scope"])
    return schemas


def validate(obj, crds):
    errors = []
    if not isinstance(obj, dict):
        return ["not an object"]
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key in MODELS:
        model = MODELS[key]
        strict(obj, model, obj.get("kind", "?"), errors)
        try:
            deserialize(obj, model)
        except (ValueError, TypeError) as e:
            errors.append(f"{model}: {e}")
        if key == ("apiextensions.k8s.io/v1", "CustomResourceDefinition"):
            for v in obj["spec"]["versions"]:
                try:
                    jsonschema.Draft4Validator.check_schema(v["schema"]["openAPIV3Schema"])
                except jsonschema.SchemaError as e:
                    errors.append(f"openAPIV3Schema of {v['name']}: {e.message}")
    elif key in crds:
        schema, scope = crds[key]
        for e in jsonschema.Draft4Validator(schema).iter_errors(obj):
            errors.append(f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}")
        ns = obj.get("metadata", {}).get("namespace")
        if scope == "Cluster" and ns:
            errors.append("metadata.namespace set on a cluster-scoped resource")
    else:
        errors.append(f"no model or CRD for {key}")
    name = obj.get("metadata", {}).get("name")
    if not name:
        errors.append("metadata.name missing")
    elif not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or len(name) > 253:
        errors.append(f"metadata.name {name!r} is not a DNS-1123 subdomain")
    return errors


def load(path):
    with open(path) as f:
        text = f.read()
    if text.lstrip().startswith(("{", "[")):
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    return [d for d in yaml.safe_load_all(text) if d is not None]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--crds", action="append", default=[])
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    crds = load_crds(args.crds)
    bad = 0
    for path in args.files:
        for obj in load(path):
            errors = validate(obj, crds)
            label = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}" if isinstance(obj, dict) else "?"
            if errors:
                bad += 1
                for e in errors:
                    print(f"INVALID {label}: {e}")
            else:
                print(f"ok {label}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
