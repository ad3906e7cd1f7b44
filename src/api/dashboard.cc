// The dashboard at `/`: one static page (HTML, CSS and script inline) that polls the API. The
// token comes from the URL fragment (#token=...) or a prompt, and is kept in localStorage.
#include "api/api.h"

namespace tessera::api {

const std::string& DashboardHtml() {
  static const std::string kPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>tessera serve</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; background: #fafafa; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
#grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 10px; }
.gpu { border-radius: 6px; padding: 10px; color: #fff; min-height: 70px; box-shadow: 0 1px 3px #0003; }
.gpu .pci { font-weight: bold; font-family: monospace; }
.gpu .state { text-transform: uppercase; font-size: .8em; letter-spacing: .05em; }
.gpu .tenant { font-size: .85em; margin-top: 4px; padding: 1px 4px; border-radius: 3px; background: #fff3; display: inline-block; }
.free { background: #2e7d32; } .reserved { background: #f9a825; } .active { background: #1565c0; }
.releasing { background: #6a1b9a; } .checking { background: #00838f; }
.quarantined { background: #c62828; } .draining { background: #616161; }
table { border-collapse: collapse; width: 100%; background: #fff; }
td, th { border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: left; font-size: .9em; }
#status { color: #888; font-size: .85em; }
</style>
</head>
<body>
<h1>tessera serve</h1>
<div id="status">connecting…</div>
<h2>GPUs</h2>
<div id="grid"></div>
<h2>Tenancies</h2>
<table><thead><tr><th>Tenancy</th><th>Weight</th><th>Fair share</th><th>Recent share</th><th>GPUs in use</th><th>GPU quota</th><th>Pending</th></tr></thead>
<tbody id="tenancies"></tbody></table>
<h2>Queue <span id="scheduling" style="font-weight:normal;color:#888"></span></h2>
<table><thead><tr><th>#</th><th>ID</th><th>Tenancy</th><th>GPUs</th><th>Priority</th><th>Why it waits</th></tr></thead>
<tbody id="queue"></tbody></table>
<h2>Containers</h2>
<table><thead><tr><th>ID</th><th>Tenancy</th><th>Image</th><th>State</th><th>GPUs</th><th>Exit</th><th>Reason</th></tr></thead>
<tbody id="containers"></tbody></table>
<script>
(function () {
  const match = location.hash.match(/token=([^&]+)/);
  if (match) localStorage.setItem('tesseraToken', decodeURIComponent(match[1]));
  let token = localStorage.getItem('tesseraToken');
  if (!token) { token = prompt('API token (admin or tenancy)') || ''; localStorage.setItem('tesseraToken', token); }
  const headers = { 'Authorization': 'Bearer ' + token };
  // A stable hue per tenancy, so one tenant's GPUs read as one colour band.
  function hue(name) { let h = 0; for (const c of name) h = (h * 31 + c.charCodeAt(0)) % 360; return h; }
  function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; }
  async function get(path) { const r = await fetch(path, { headers }); if (!r.ok) throw new Error(path + ': ' + r.status); return r.json(); }
  async function refresh() {
    try {
      const [gpus, containers, queue] = await Promise.all([get('/v1/gpus'), get('/v1/containers?order=desc&limit=200'), get('/v1/queue')]);
      const pct = (x) => (100 * x).toFixed(1) + ' %';
      const shares = document.getElementById('tenancies');
      shares.replaceChildren();
      for (const t of queue.tenancies) {
        const row = el('tr'); row.dataset.tenancy = t.name; row.dataset.weight = t.weight; row.dataset.share = t.share;
        for (const v of [t.name, t.weight, pct(t.target_share), pct(t.share), t.gpus_in_use, t.quota.gpus === null ? 'unlimited' : t.quota.gpus, t.pending]) row.appendChild(el('td', '', String(v)));
        shares.appendChild(row);
      }
      document.getElementById('scheduling').textContent = '(' + queue.scheduling + ', ' + queue.queue.length + ' waiting)';
      const waiting = document.getElementById('queue');
      waiting.replaceChildren();
      for (const q of queue.queue.slice(0, 200)) {
        const row = el('tr'); row.dataset.id = q.id; row.dataset.position = q.queue_position;
        for (const v of [q.queue_position, q.id, q.tenancy, q.gpus, q.priority, q.reason]) row.appendChild(el('td', '', String(v)));
        waiting.appendChild(row);
      }
      const grid = document.getElementById('grid');
      grid.replaceChildren();
      for (const g of gpus.gpus) {
        const card = el('div', 'gpu ' + g.state);
        card.dataset.pci = g.pci_address; card.dataset.state = g.state; card.dataset.tenancy = g.tenancy || ''; card.dataset.container = g.container_id || '';
        card.appendChild(el('div', 'pci', g.pci_address));
        card.appendChild(el('div', 'state', g.state));
        if (g.tenancy) { const t = el('div', 'tenant', g.tenancy); t.style.borderLeft = '6px solid hsl(' + hue(g.tenancy) + ',80%,60%)'; card.appendChild(t); }
        if (g.shared) {
          // A shared GPU: its mode, what holds the limits, each share, and a daemon fault.
          card.dataset.shared = g.shared.mode;
          card.dataset.enforcement = g.shared.enforcement;
          card.appendChild(el('div', 'shared', g.shared.mode + ' · enforcement ' + g.shared.enforcement));
          for (const s of g.shared.shares) card.appendChild(el('div', 'share', s.memory + ' / ' + s.compute + '% ' + (s.tenancy || s.container_id)));
          if (!g.shared.healthy) card.appendChild(el('div', 'fault', 'fault: ' + g.shared.fault));
        }
        if (g.reason) card.title = g.reason;
        grid.appendChild(card);
      }
      const body = document.getElementById('containers');
      body.replaceChildren();
      for (const c of containers.containers) {
        const row = el('tr'); row.dataset.id = c.id; row.dataset.state = c.state; row.dataset.tenancy = c.tenancy; row.dataset.gpus = c.gpus.join(' ');
        const held = c.mig ? c.mig.count + ' x ' + c.mig.profile : c.share ? c.share.memory + ' / ' + c.share.compute + '% ' + c.share.mode : c.gpus.length;
        if (c.enforcement) row.dataset.enforcement = c.enforcement;
        for (const v of [c.id, c.tenancy, c.image, c.state, held + (c.enforcement ? ' (' + c.enforcement + ')' : ''), c.exit_code === null ? '' : c.exit_code, c.reason]) row.appendChild(el('td', '', String(v)));
        body.appendChild(row);
      }
      document.getElementById('status').textContent = 'updated ' + new Date().toLocaleTimeString() + ' · ' + gpus.gpus.length + ' GPUs · ' + containers.containers.length + (containers.next ? ' newest containers' : ' containers');
    } catch (e) {
      document.getElementById('status').textContent = 'error: ' + e.message;
    }
  }
  refresh();
  setInterval(refresh, 1000);
})();
</script>
</body>
</html>
)html";
  return kPage;
}

}  // namespace tessera::api
