// The dashboard at `/`: one static page (HTML, CSS and script inline, no build step) for a fleet
// of up to hundreds of GPUs. Each poll is one request, GET /v1/dashboard (with the selected
// tenancy's usage series embedded: the usage API's own answer), and updates the page in place:
// a row per node, its GPUs grouped by NVLink partition, each card with model, lease state,
// tenancy, utilisation and memory bars and, for quarantined or draining GPUs, the reason in
// the card itself. The token comes from the URL fragment (#token=...) or a prompt and is kept in
// localStorage.
#include "api/api.h"

namespace tessera::api {

const std::string& DashboardHtml() {
  static const std::string kPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>tessera</title>
<style>
:root { --bg: #f4f5f7; --card: #fff; --ink: #1d2330; --muted: #6b7280; --line: #e3e6ea; }
* { box-sizing: border-box; }
body { font: 13px/1.35 system-ui, sans-serif; margin: 0; background: var(--bg); color: var(--ink); }
header { position: sticky; top: 0; z-index: 2; background: #1d2330; color: #fff; padding: 8px 16px;
  display: flex; gap: 18px; align-items: center; flex-wrap: wrap; }
header h1 { font-size: 15px; margin: 0 8px 0 0; }
header .count { font-variant-numeric: tabular-nums; }
header .count b { font-weight: 600; }
header select { font: inherit; }
#status { color: #aab1bf; margin-left: auto; }
main { padding: 12px 16px; }
h2 { font-size: 14px; margin: 18px 0 8px; }
.node { display: flex; align-items: stretch; gap: 10px; background: var(--card); border: 1px solid var(--line);
  border-radius: 6px; padding: 6px 8px; margin-bottom: 6px; }
.node .name { width: 120px; flex: none; font-weight: 600; overflow: hidden; text-overflow: ellipsis;
  white-space: nowrap; align-self: center; }
.node .groups { display: flex; gap: 10px; flex-wrap: wrap; }
.group { display: flex; gap: 4px; padding: 3px; border-radius: 5px; background: #eef1f5; position: relative; }
.group[data-label]:not([data-label=""])::before { content: attr(data-label); position: absolute; top: -1px; left: 4px;
  font-size: 9px; color: var(--muted); }
.group[data-label]:not([data-label=""]) { padding-top: 11px; }
.gpu { width: 118px; height: 74px; border-radius: 4px; padding: 3px 5px; background: var(--card);
  border: 1px solid var(--line); border-left: 5px solid #9ca3af; overflow: hidden; font-size: 11px; }
.gpu .top { display: flex; justify-content: space-between; gap: 4px; }
.gpu .model { color: var(--muted); white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.gpu .state { font-size: 9px; font-weight: 700; text-transform: uppercase; letter-spacing: .04em; }
.gpu .tenant { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; font-weight: 600; height: 15px; }
.gpu .reason { color: #b42318; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; font-size: 10px; }
.bar { height: 5px; background: #e5e7eb; border-radius: 3px; margin-top: 3px; overflow: hidden; }
.bar > i { display: block; height: 100%; width: 0; }
.bar.util > i { background: #2563eb; } .bar.mem > i { background: #7c3aed; }
.gpu.free { border-left-color: #16a34a; } .gpu.reserved { border-left-color: #ca8a04; }
.gpu.active { border-left-color: #2563eb; } .gpu.releasing { border-left-color: #7c3aed; }
.gpu.checking { border-left-color: #0891b2; } .gpu.quarantined { border-left-color: #dc2626; background: #fef2f2; }
.gpu.draining { border-left-color: #4b5563; background: #f3f4f6; } .gpu.lost { background: #fee2e2; }
.gpu.dim { opacity: .18; }
.node.hidden { display: none; }
table { border-collapse: collapse; width: 100%; background: var(--card); border: 1px solid var(--line); }
td, th { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left; font-variant-numeric: tabular-nums; }
th { font-weight: 600; color: var(--muted); }
.swatch { display: inline-block; width: 9px; height: 9px; border-radius: 2px; margin-right: 5px; }
#chart { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 8px; }
#chart svg { width: 100%; height: 160px; display: block; }
.legend { color: var(--muted); font-size: 11px; }
</style>
</head>
<body>
<header>
  <h1>tessera</h1>
  <span class="count" id="counts"></span>
  <label>Tenancy <select id="filter-tenancy"><option value="">all</option></select></label>
  <label>State <select id="filter-state">
    <option value="">all</option><option>free</option><option>reserved</option><option>active</option>
    <option>releasing</option><option>checking</option><option>quarantined</option><option>draining</option>
    <option value="attention">needs attention</option></select></label>
  <span id="status">connecting…</span>
</header>
<main>
<div id="nodes"></div>
<h2>Usage <select id="usage-tenancy"></select> <select id="usage-range"><option value="hour">last hour</option><option value="day">last day</option></select></h2>
<div id="chart"><svg id="chart-svg" viewBox="0 0 1000 160" preserveAspectRatio="none"></svg>
<div class="legend" id="chart-legend"></div></div>
<h2>Tenancies</h2>
<table><thead><tr><th>Tenancy</th><th>Weight</th><th>Fair share</th><th>Recent share</th><th>GPUs in use</th><th>GPU quota</th><th>Pending</th><th>SM now (GPUs)</th><th>GPU memory</th></tr></thead>
<tbody id="tenancies"></tbody></table>
</main>
<script>
(function () {
  const match = location.hash.match(/token=([^&]+)/);
  if (match) localStorage.setItem('tesseraToken', decodeURIComponent(match[1]));
  let token = localStorage.getItem('tesseraToken');
  if (!token) { token = prompt('API token (admin or tenancy)') || ''; localStorage.setItem('tesseraToken', token); }
  const headers = { 'Authorization': 'Bearer ' + token };
  const $ = (id) => document.getElementById(id);
  function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; }
  // A stable hue per tenancy, so one tenant's GPUs read as one colour.
  function hue(name) { let h = 0; for (const c of name) h = (h * 31 + c.charCodeAt(0)) % 360; return h; }
  const GiB = (b) => (b / 1073741824).toFixed(1);
  const pct = (x) => (100 * x).toFixed(1) + ' %';
  const shortModel = (m) => (m || '').replace(/^NVIDIA /, '').replace(/ HBM\w*/, '');
  const attention = new Set(['quarantined', 'draining', 'checking']);
  const cards = new Map();   // GPU id -> card elements, reused across polls
  const rows = new Map();    // node name -> row element
  let last = null;

  function card(g) {
    let c = cards.get(g.id);
    if (!c) {
      const root = el('div', 'gpu');
      const top = el('div', 'top'); const name = el('span', 'model'); const state = el('span', 'state');
      top.append(name, state);
      const tenant = el('div', 'tenant'); const util = el('div', 'bar util'); const mem = el('div', 'bar mem');
      util.append(el('i')); mem.append(el('i'));
      const reason = el('div', 'reason');
      root.append(top, tenant, util, mem, reason);
      c = { root, name, state, tenant, util: util.firstChild, mem: mem.firstChild, reason };
      cards.set(g.id, c);
    }
    const r = c.root;
    r.className = 'gpu ' + g.state + (g.lost ? ' lost' : '');
    r.dataset.id = g.id; r.dataset.state = g.state; r.dataset.tenancy = g.tenancy || ''; r.dataset.node = g.node;
    // A shared GPU: its mode and what enforces its shares (driver, watchdog, none).
    r.dataset.shared = g.shared ? g.shared.mode : ''; r.dataset.enforcement = g.shared ? g.shared.enforcement : '';
    r.dataset.reason = g.reason || ''; r.dataset.util = g.util_percent === null ? '' : g.util_percent;
    const label = (g.module ? 'M' + g.module : g.pci_address.slice(5)) + ' ' + shortModel(g.model);
    c.name.textContent = label; c.state.textContent = g.lost ? 'lost' : g.state;
    c.tenant.textContent = g.tenancy ? g.tenancy : (g.mig ? 'MIG ' + g.mig.held + '/' + g.mig.slices :
      g.shared ? g.shared.mode + ' ' + g.shared.shares.length + ' shares' : '');
    c.tenant.style.color = g.tenancy ? 'hsl(' + hue(g.tenancy) + ',70%,35%)' : '';
    const util = g.util_percent === null ? 0 : g.util_percent;
    c.util.style.width = Math.min(100, util) + '%';
    const memFraction = g.memory_total ? g.memory_used / g.memory_total : 0;
    c.mem.style.width = (100 * memFraction).toFixed(1) + '%';
    // What an operator acts on is in the card, not only in a tooltip.
    const why = (g.state === 'quarantined' || g.state === 'draining' || g.drain_requested || g.quarantine_requested || !g.available)
      ? (g.reason || (g.drain_requested ? 'drain requested' : g.quarantine_requested ? 'quarantine requested' : !g.available ? 'node gone' : '')) : '';
    c.reason.textContent = why || (g.shared && !g.shared.healthy ? 'fault: ' + g.shared.fault : '');
    r.title = g.id + '\n' + (g.model || '') + '\nstate: ' + g.state + (g.reason ? '\nreason: ' + g.reason : '') +
      (g.tenancy ? '\ntenancy: ' + g.tenancy + ' (' + g.container_id + ')' : '') +
      (g.shared ? '\nshared (' + g.shared.mode + ', enforcement ' + g.shared.enforcement + '): ' +
        g.shared.shares.map(s => s.memory + ' / ' + s.compute + '% ' + (s.tenancy || s.container_id)).join(', ') : '') +
      (g.util_percent === null ? '' : '\nutilisation: ' + g.util_percent + ' %') +
      (g.memory_total ? '\nmemory: ' + GiB(g.memory_used) + ' / ' + GiB(g.memory_total) + ' GiB' : '') +
      (g.power_watts === null ? '' : '\npower: ' + g.power_watts.toFixed(0) + ' W');
    return r;
  }

  function drawNodes(doc) {
    const container = $('nodes');
    const seen = new Set();
    doc.nodes.forEach((node, i) => {
      const key = node.name || '(this host)';
      seen.add(key);
      let row = rows.get(key);
      if (!row) { row = el('div', 'node'); row.append(el('div', 'name'), el('div', 'groups')); rows.set(key, row); }
      row.dataset.node = key;
      row.firstChild.textContent = key;
      const groups = row.lastChild;
      const wanted = node.groups.map((group) => {
        const g = el('div', 'group'); g.dataset.label = group.label;
        for (const index of group.gpus) g.append(card(doc.gpus[index]));
        return g;
      });
      groups.replaceChildren(...wanted);
      if (container.children[i] !== row) container.insertBefore(row, container.children[i] || null);
    });
    for (const [key, row] of rows) if (!seen.has(key)) { row.remove(); rows.delete(key); }
    applyFilters();
  }

  function applyFilters() {
    const tenancy = $('filter-tenancy').value, state = $('filter-state').value;
    for (const row of rows.values()) {
      let any = false;
      for (const c of row.querySelectorAll('.gpu')) {
        const ok = (!tenancy || c.dataset.tenancy === tenancy) &&
          (!state || (state === 'attention' ? attention.has(c.dataset.state) || c.querySelector('.reason').textContent !== '' : c.dataset.state === state));
        c.classList.toggle('dim', !ok); any = any || ok;
      }
      row.classList.toggle('hidden', !any);
    }
  }

  function fillSelect(select, names, keepAll) {
    const current = select.value;
    const options = (keepAll ? [''] : []).concat(names);
    if ([...select.options].map(o => o.value).join('\n') !== options.join('\n')) {
      select.replaceChildren(...options.map(n => { const o = el('option', '', n || 'all'); o.value = n; return o; }));
    }
    if (options.includes(current)) select.value = current;
  }

  function drawTenancies(doc) {
    const body = $('tenancies');
    body.replaceChildren(...doc.tenancies.map((t) => {
      const row = el('tr'); row.dataset.tenancy = t.name; row.dataset.weight = t.weight; row.dataset.share = t.share;
      const name = el('td'); const sw = el('span', 'swatch'); sw.style.background = 'hsl(' + hue(t.name) + ',70%,45%)';
      name.append(sw, document.createTextNode(t.name)); row.append(name);
      for (const v of [t.weight, pct(t.target_share), pct(t.share), t.gpus_in_use + (t.mig_gpus_in_use ? ' + ' + t.mig_gpus_in_use.toFixed(2) + ' MIG' : ''),
                       t.quota_gpus === null ? 'unlimited' : t.quota_gpus, t.pending, (t.sm_percent / 100).toFixed(2), GiB(t.memory_bytes) + ' GiB'])
        row.append(el('td', '', String(v)));
      return row;
    }));
  }

  // The selected tenancy's usage, bucketed by the usage API (average GPUs held per bucket, and
  // the GPUs' measured SM use where telemetry counted it).
  function drawChart(usage) {
    const svg = $('chart-svg');
    const ns = 'http://www.w3.org/2000/svg';
    svg.replaceChildren();
    if (!usage || !usage.series) { $('chart-legend').textContent = 'no tenancy selected'; return; }
    const series = usage.series, step = usage.step_s;
    const held = series.map(b => b.gpu_seconds / step);
    const sm = series.map(b => (b.sm_seconds || 0) / step);
    const top = Math.max(1, ...held, ...sm);
    const w = 1000 / series.length;
    series.forEach((b, i) => {
      const h = 150 * held[i] / top;
      const rect = document.createElementNS(ns, 'rect');
      rect.setAttribute('x', i * w); rect.setAttribute('width', Math.max(w - 0.5, 0.5));
      rect.setAttribute('y', 155 - h); rect.setAttribute('height', h); rect.setAttribute('fill', '#93c5fd');
      svg.append(rect);
      if (sm[i] > 0) {
        const s = document.createElementNS(ns, 'rect');
        const hs = 150 * sm[i] / top;
        s.setAttribute('x', i * w); s.setAttribute('width', Math.max(w - 0.5, 0.5));
        s.setAttribute('y', 155 - hs); s.setAttribute('height', hs); s.setAttribute('fill', '#1d4ed8');
        svg.append(s);
      }
    });
    svg.dataset.buckets = series.length;
    svg.dataset.gpuSeconds = usage.gpu_seconds;
    $('chart-legend').textContent = usage.tenancy + ': ' + (usage.gpu_seconds / 3600).toFixed(2) + ' GPU-hours held' +
      (usage.sm_seconds !== undefined ? ', ' + (usage.sm_seconds / 3600).toFixed(2) + ' SM-GPU-hours measured' : '') +
      ' · light: GPUs held (average per ' + (step / 60) + ' min), dark: SM use measured · peak ' + top.toFixed(2) + ' GPUs';
  }

  async function refresh() {
    try {
      const tenancy = $('usage-tenancy').value;
      let path = '/v1/dashboard';
      if (tenancy) path += '?usage=' + encodeURIComponent(tenancy) + '&range=' + $('usage-range').value;
      const r = await fetch(path, { headers });
      if (!r.ok) throw new Error(path + ': ' + r.status);
      const doc = await r.json();
      last = doc;
      const names = doc.tenancies.map(t => t.name);
      fillSelect($('filter-tenancy'), names, true);
      fillSelect($('usage-tenancy'), names, false);
      drawNodes(doc);
      drawTenancies(doc);
      drawChart(doc.usage);
      const s = doc.counts.gpus, c = doc.counts.containers;
      $('counts').textContent = doc.gpus.length + ' GPUs: ' + s.free + ' free · ' + (s.reserved + s.active) + ' leased · ' +
        (s.releasing + s.checking) + ' checking · ' + s.quarantined + ' quarantined · ' + s.draining + ' draining — containers: ' +
        c.running + ' running · ' + c.pending + ' pending (' + doc.counts.queue + ' queued)';
      $('status').textContent = 'updated ' + new Date().toLocaleTimeString() + ' · ' + doc.gpus.length + ' GPUs on ' + doc.nodes.length + ' nodes' +
        (doc.telemetry_ms ? ' · telemetry ' + Math.round((doc.time_ms - doc.telemetry_ms) / 1000) + ' s old' : ' · no telemetry');
    } catch (e) {
      $('status').textContent = 'error: ' + e.message;
    }
  }
  $('filter-tenancy').addEventListener('change', applyFilters);
  $('filter-state').addEventListener('change', applyFilters);
  $('usage-tenancy').addEventListener('change', refresh);
  $('usage-range').addEventListener('change', refresh);
  refresh();
  setInterval(refresh, 2000);
})();
</script>
</body>
</html>
)html";
  return kPage;
}

}  // namespace tessera::api
