#!/usr/bin/env python3
"""A scripted Kubernetes API server for tests: an in-memory object store behind the REST paths
of the API (create/get/list/replace/merge-patch/delete, /status subresources, watch streams
with resourceVersion, for every kind: core objects, Secrets, coordination.k8s.io Leases and the
tessera.dev custom resources), resourceVersion preconditions on every update and patch (409
Conflict when stale), response bodies shaped like the API reference's (Status objects, *List
kinds), optional TLS with client-certificate verification and bearer-token checks, and a
control API under /_tessera/ to inject faults (one-shot status codes, Retry-After), compact the
event history (watch from an older resourceVersion gets 410 Gone) and read the request log.

Hostile answers for the node daemons' tests, as scripted rules (by method and path regex):
"deep": N serves the live object with a field nested N arrays deep; "huge_bytes": N serves it
padded to N bytes, streamed in pieces with its Content-Length (or chunked, with "chunked": true),
never held whole; and
"trickle_interval": S serves it one byte every S seconds, until the client goes away.

Prints "PORT <n>" on stdout once listening."""
import argparse
import bisect
import copy
import http.server
import json
import re
import socketserver
import ssl
import sys
import threading
import time
import uuid
from urllib.parse import urlsplit, parse_qs

LOCK = threading.Condition()
STORE = {}  # (collection, name) -> object
EVENTS = []  # (rv, collection, type, object)
EVENT_RVS = []  # the rv of each entry of EVENTS (ascending), to resume a watch without a scan
# "compactions" counts compactions: a watch open across one ends there (see Handler.watch).
STATE = {"rv": 100, "compacted": 0, "compactions": 0, "rules": [], "log": [],
         "watch_seconds": 2.0}
ARGS = None


def fields_match(obj, query):
    """fieldSelector of equalities on dotted paths ("spec.nodeName=node-1"), as the API server
    serves it for the fields it indexes."""
    selector = query.get("fieldSelector", [""])[0]
    for term in filter(None, selector.split(",")):
        path, _, want = term.partition("=")
        value = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if (value if value is not None else "") != want:
            return False
    return True


def status_body(code, reason, message, name="", kind=""):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": {"name": name, "kind": kind},
            "code": code}


def parse_path(path):
    """-> (prefix, namespace, plural, name, subresource) or None."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        prefix, rest = "/".join(parts[:2]), parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        prefix, rest = "/".join(parts[:3]), parts[3:]
    else:
        return None
    ns = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    if not rest:
        return None
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    return prefix, ns, plural, name, sub


def collection_of(prefix, ns, plural):
    return "/" + prefix + ("/namespaces/" + ns if ns else "") + "/" + plural


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def record(collection, kind, obj):
    STATE["rv"] += 1
    obj.setdefault("metadata", {})["resourceVersion"] = str(STATE["rv"])
    EVENTS.append((STATE["rv"], collection, kind, copy.deepcopy(obj)))
    EVENT_RVS.append(STATE["rv"])
    LOCK.notify_all()


def list_kind(items, plural):
    if items:
        return items[0].get("kind", "") + "List", items[0].get("apiVersion", "v1")
    return plural.capitalize() + "List", "v1"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The API server (Go's net/http) sets TCP_NODELAY on every connection. Without it, the body
    # written after the headers waits for the client's delayed ACK (40 ms) on a kept-alive
    # connection.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def send_json(self, code, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else None

    def handle_any(self, method):
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        payload = self.body()
        if url.path.startswith("/_tessera/"):
            return self.control(url.path, payload)
        with LOCK:
            # Like a server (or a load balancer) dropping a kept-alive connection: answered, then
            # closed without a "Connection: close".
            if STATE.pop("close_next", False):
                self.close_connection = True
            STATE["log"].append({"method": method, "path": url.path, "query": url.query,
                                 "peerPort": self.client_address[1],
                                 "authorization": self.headers.get("Authorization", ""),
                                 "contentType": self.headers.get("Content-Type", ""),
                                 "userAgent": self.headers.get("User-Agent", ""),
                                 "clientCert": bool(self.connection.getpeercert()) if ARGS.tls_cert else False,
                                 "body": payload})
            hostile = None
            for rule in STATE["rules"]:
                if rule.get("times", 1) > 0 and rule.get("method", method) == method and \
                        re.search(rule["path"], self.path):
                    rule["times"] = rule.get("times", 1) - 1
                    if any(k in rule for k in ("deep", "huge_bytes", "trickle_interval")):
                        parsed = parse_path(url.path)
                        live = STORE.get((collection_of(*parsed[:3]), parsed[3])) if parsed else None
                        hostile = (rule, copy.deepcopy(live) if live else {"metadata": {}})
                        break
                    body = rule.get("body") or status_body(rule["status"], rule.get("reason", ""),
                                                           rule.get("message", "scripted"))
                    return self.send_json(rule["status"], body, rule.get("headers"))
        if hostile:
            # Outside the lock: other requests go on while this one is answered.
            return self.send_hostile(*hostile)
        if ARGS.client_ca and not self.connection.getpeercert():
            return self.send_json(401, status_body(401, "Unauthorized", "Unauthorized"))
        if ARGS.token and self.headers.get("Authorization") != "Bearer " + ARGS.token:
            return self.send_json(401, status_body(401, "Unauthorized", "Unauthorized"))
        parsed = parse_path(url.path)
        if not parsed:
            return self.send_json(404, status_body(404, "NotFound", "the server could not find the requested resource"))
        prefix, ns, plural, name, sub = parsed
        collection = collection_of(prefix, ns, plural)
        if method == "GET" and not name:
            if query.get("watch", ["0"])[0] in ("1", "true"):
                return self.watch(collection, query)
            return self.list(collection, plural, query)
        with LOCK:
            key = (collection, name)
            live = STORE.get(key)
            if method == "POST":
                name = (payload.get("metadata") or {}).get("name", "")
                key = (collection, name)
                if key in STORE:
                    return self.send_json(409, status_body(409, "AlreadyExists",
                                          f'{plural} "{name}" already exists', name, plural))
                obj = copy.deepcopy(payload)
                meta = obj.setdefault("metadata", {})
                meta.update({"uid": str(uuid.uuid4()), "generation": 1,
                             "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
                if ns:
                    meta["namespace"] = ns
                # Kinds with a status subresource ignore status on create, like the API server; the
                # scheduler (played by a test) writes a ResourceClaim's allocation through /status.
                obj.pop("status", None) if sub == "" and plural in ("tenancies", "gpuleases", "gpucontainers", "resourceclaims") else None
                STORE[key] = obj
                record(collection, "ADDED", obj)
                return self.send_json(201, obj)
            if live is None:
                return self.send_json(404, status_body(404, "NotFound", f'{plural} "{name}" not found', name, plural))
            if method == "GET" and sub == "log":
                data = ("logs of " + name + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if method == "GET":
                return self.send_json(200, live)
            if method == "DELETE":
                # DeleteOptions.preconditions.resourceVersion, as the API server checks it.
                want = (((payload or {}).get("preconditions")) or {}).get("resourceVersion")
                if want and want != live["metadata"]["resourceVersion"]:
                    return self.send_json(409, status_body(409, "Conflict",
                        f'Precondition failed: resourceVersion {want} of {plural} "{name}" is stale', name, plural))
                del STORE[key]
                record(collection, "DELETED", live)
                return self.send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                            "status": "Success", "details": {"name": name, "kind": plural}})
            if method == "PUT":
                want = (payload.get("metadata") or {}).get("resourceVersion")
                if want and want != live["metadata"]["resourceVersion"]:
                    return self.send_json(409, status_body(409, "Conflict",
                        f'Operation cannot be fulfilled on {plural} "{name}": the object has been modified; please apply your changes to the latest version and try again', name, plural))
                obj = copy.deepcopy(payload)
                keep = {k: live["metadata"][k] for k in ("uid", "creationTimestamp", "generation", "namespace") if k in live["metadata"]}
                obj.setdefault("metadata", {}).update(keep)
                if sub == "status":
                    obj = dict(live, status=payload.get("status"))
                elif obj.get("spec") != live.get("spec"):
                    obj["metadata"]["generation"] = live["metadata"].get("generation", 1) + 1
                if "status" in live and sub != "status":
                    obj["status"] = live["status"]
                STORE[key] = obj
                record(collection, "MODIFIED", obj)
                return self.send_json(200, obj)
            if method == "PATCH":
                # A merge patch carrying metadata.resourceVersion is a precondition, as on PUT.
                want = ((payload or {}).get("metadata") or {}).get("resourceVersion")
                if want and want != live["metadata"]["resourceVersion"]:
                    return self.send_json(409, status_body(409, "Conflict",
                        f'Operation cannot be fulfilled on {plural} "{name}": the object has been modified; please apply your changes to the latest version and try again', name, plural))
                if sub == "status":
                    obj = copy.deepcopy(live)
                    obj["status"] = merge_patch(live.get("status"), (payload or {}).get("status", {}))
                else:
                    patch = dict(payload or {})
                    patch.pop("status", None)
                    obj = merge_patch(live, patch)
                    if obj.get("spec") != live.get("spec"):
                        obj["metadata"]["generation"] = live["metadata"].get("generation", 1) + 1
                STORE[key] = obj
                record(collection, "MODIFIED", obj)
                return self.send_json(200, obj)
        return self.send_json(405, status_body(405, "MethodNotAllowed", method))

    def send_hostile(self, rule, obj):
        try:
            if "deep" in rule:
                n = int(rule["deep"])
                head = json.dumps(obj)[:-1] + (', ' if obj else '') + '"deep": '
                data = (head + "[" * n + "]" * n + "}").encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif "huge_bytes" in rule:
                total = int(rule["huge_bytes"])
                obj.setdefault("metadata", {}).setdefault("annotations", {})["pad"] = ""
                text = json.dumps(obj)
                cut = text.index('"pad": ""') + len('"pad": "')
                head, tail = text[:cut].encode(), text[cut:].encode()
                pad = max(0, total - len(head) - len(tail))
                chunked = bool(rule.get("chunked"))
                write = self.chunk if chunked else self.wfile.write
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if chunked:  # no length up front: only counting while reading can stop it
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(len(head) + pad + len(tail)))
                self.end_headers()
                write(head)
                piece = b"x" * (1 << 20)
                while pad > 0:
                    write(piece[:min(pad, len(piece))])
                    pad -= min(pad, len(piece))
                write(tail)
                if chunked:
                    self.chunk(b"")
            else:
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.flush()
                for i in range(len(data)):
                    time.sleep(float(rule["trickle_interval"]))
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def list(self, collection, plural, query):
        selector = query.get("labelSelector", [""])[0]
        want = dict(p.split("=", 1) for p in selector.split(",") if "=" in p)
        with LOCK:
            # A list without a namespace spans every namespace (GET /api/v1/pods).
            prefix, plural_name = collection.rsplit("/", 1)
            across = re.compile(re.escape(prefix) + r"/namespaces/[^/]+/" + re.escape(plural_name) + "$")
            items = [o for (c, _), o in sorted(STORE.items())
                     if c == collection or ("/namespaces/" not in collection and across.match(c))]
            items = [o for o in items if all(o["metadata"].get("labels", {}).get(k) == v for k, v in want.items())]
            items = [o for o in items if fields_match(o, query)]
            kind, api_version = list_kind(items, plural)
            metadata = {"resourceVersion": str(STATE["rv"])}
            # Pages (limit/continue) as the API server cuts them; the token is an offset here.
            limit = int(query.get("limit", ["0"])[0] or 0)
            if limit > 0:
                start = int(query.get("continue", ["0"])[0] or 0)
                if start + limit < len(items):
                    metadata["continue"] = str(start + limit)
                items = items[start:start + limit]
            items = [copy.deepcopy(o) for o in items]
            body = {"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": items}
        return self.send_json(200, body)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def watch(self, collection, query):
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        selector = query.get("labelSelector", [""])[0]
        want = dict(p.split("=", 1) for p in selector.split(",") if "=" in p)
        # Like a list, a watch without a namespace spans every namespace (GET /api/v1/pods?watch=1).
        prefix, plural_name = collection.rsplit("/", 1)
        across = re.compile(re.escape(prefix) + r"/namespaces/[^/]+/" + re.escape(plural_name) + "$")

        def matches(c, obj):
            if c != collection and ("/namespaces/" in collection or not across.match(c)):
                return False
            labels = obj.get("metadata", {}).get("labels", {}) or {}
            return all(labels.get(k) == v for k, v in want.items()) and fields_match(obj, query)

        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.time() + STATE["watch_seconds"]
        try:
            with LOCK:
                if since and since < STATE["compacted"]:
                    err = {"type": "ERROR", "object": status_body(410, "Expired",
                           f"too old resource version: {since} ({STATE['compacted']})")}
                    self.chunk(json.dumps(err).encode() + b"\n")
                    self.chunk(b"")
                    return
                sent = since
                # A compaction ends the watches open at that moment, before they send another
                # event: the client's next watch starts from the version it had and gets 410.
                # Counted rather than flagged, so no later request can undo it for a watch that
                # has not yet run again (a thread of this server may wait long for the lock).
                opened_in = STATE["compactions"]
                while STATE["compactions"] == opened_in:
                    for rv, c, kind, obj in EVENTS[bisect.bisect_right(EVENT_RVS, sent):]:
                        if matches(c, obj):
                            self.chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                            sent = rv
                    sent = max(sent, STATE["rv"]) if sent else STATE["rv"]
                    left = deadline - time.time()
                    if left <= 0:
                        break
                    LOCK.wait(min(left, 0.1))
            self.chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def control(self, path, payload):
        with LOCK:
            if path == "/_tessera/script":
                STATE["rules"].extend(payload["rules"])
            elif path == "/_tessera/compact":
                STATE["compacted"] = STATE["rv"] + 1
                STATE["compactions"] += 1
                LOCK.notify_all()
            elif path == "/_tessera/close-after-next":
                STATE["close_next"] = True
            elif path == "/_tessera/watch-seconds":
                STATE["watch_seconds"] = float(payload["seconds"])
            elif path == "/_tessera/log":
                return self.send_json(200, {"log": STATE["log"]})
            elif path == "/_tessera/clear-log":
                STATE["log"].clear()
            else:
                return self.send_json(404, {})
        return self.send_json(200, {})

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_PATCH(self):
        self.handle_any("PATCH")

    def do_DELETE(self):
        self.handle_any("DELETE")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--token", default="")
    parser.add_argument("--tls-cert", default="")
    parser.add_argument("--tls-key", default="")
    parser.add_argument("--client-ca", default="")
    ARGS = parser.parse_args()
    server = Server(("127.0.0.1", 0), Handler)
    if ARGS.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(ARGS.tls_cert, ARGS.tls_key)
        if ARGS.client_ca:
            context.load_verify_locations(ARGS.client_ca)
            # Optional at the TLS layer so the control API stays reachable; API requests
            # without a verified client certificate get 401 like an API server without
            # anonymous auth.
            context.verify_mode = ssl.CERT_OPTIONAL
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print("PORT", server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
