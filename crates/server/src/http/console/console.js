// Tarn's read-only web console: a few pages rendered from the broker's
// /api/ endpoints, with charts drawn as inline SVG. No outside scripts, no
// framework; every value from the broker is inserted as text, never as HTML.
"use strict";

const COLORS = { produce: "#1f6feb", fetch: "#2da44e", lag: "#d9480f" };
const GROUP_COLORS = ["#d9480f", "#7048e8", "#0c8599", "#e8590c", "#5c940d", "#c2255c", "#1971c2", "#862e9c"];
const SVG_NS = "http://www.w3.org/2000/svg";
let refreshTimer = null;
let pageToken = 0;

// h("td", {class: "num"}, "12") builds an element; strings become text nodes.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

async function api(path) {
  const response = await fetch(path, { cache: "no-store" });
  const text = await response.text();
  if (!response.ok) throw new Error(`${path}: ${response.status} ${text.trim()}`);
  return JSON.parse(text);
}

const fmt = {
  int(n) { return Number(n).toLocaleString("en-US"); },
  bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    n = Number(n);
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${i === 0 ? Math.round(n) : n.toFixed(1)} ${units[i]}`;
  },
  rate(n, unit) {
    n = Number(n);
    if (unit === "B") return `${fmt.bytes(n)}/s`;
    if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M/s`;
    if (n >= 1e3) return `${(n / 1e3).toFixed(1)} k/s`;
    return `${n.toFixed(n < 10 && n > 0 ? 1 : 0)}/s`;
  },
  duration(seconds) {
    seconds = Math.floor(seconds);
    const d = Math.floor(seconds / 86400), hh = Math.floor(seconds % 86400 / 3600);
    const m = Math.floor(seconds % 3600 / 60), s = seconds % 60;
    if (d) return `${d}d ${hh}h`;
    if (hh) return `${hh}h ${m}m`;
    if (m) return `${m}m ${s}s`;
    return `${s}s`;
  },
  time(ms) { return new Date(ms).toISOString().replace("T", " ").replace("Z", ""); },
  clock(ms) { return new Date(ms).toTimeString().slice(0, 8); },
  axis(n, unit) {
    if (unit === "B") return `${fmt.bytes(n)}/s`;
    if (unit === "/s") return n >= 1e3 ? fmt.rate(n) : `${Math.round(n)}/s`;
    return n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : String(Math.round(n));
  },
};

function card(label, value, sub, id) {
  return h("div", { class: "card", id }, h("div", { class: "label" }, label),
    h("div", { class: "value" }, value), sub ? h("div", { class: "sub" }, sub) : null);
}

// The smallest of 4, 8, 20, 40, 80, 200, ... at or above v, so the four
// grid steps are round numbers.
function niceMax(v) {
  let step = 1;
  for (;;) {
    for (const m of [1, 2, 5]) {
      if (4 * m * step >= v) return 4 * m * step;
    }
    step *= 10;
  }
}

// A line chart of series [{label, color, points: [[unixMs, value], ...]}].
function lineChart(title, series, unit, id) {
  const W = 600, H = 170, L = 64, R = 8, T = 8, B = 22;
  const all = series.flatMap((s) => s.points);
  const root = h("div", { class: "chart", id });
  root.append(h("h3", {}, title));
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
  const now = all.length ? Math.max(...all.map((p) => p[0])) : Date.now();
  const t0 = Math.min(now - 60_000, ...all.map((p) => p[0]));
  const max = niceMax(Math.max(0, ...all.map((p) => p[1])));
  const x = (t) => L + (W - L - R) * (t - t0) / Math.max(1, now - t0);
  const y = (v) => T + (H - T - B) * (1 - v / max);
  for (let i = 0; i <= 4; i++) {
    const v = max * i / 4;
    chart.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e6e9ee", "stroke-width": 1 }));
    chart.append(svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7685" }, fmt.axis(v, unit)));
  }
  chart.append(svg("text", { x: L, y: H - 6, "font-size": 11, fill: "#6b7685" }, fmt.clock(t0)));
  chart.append(svg("text", { x: W - R, y: H - 6, "text-anchor": "end", "font-size": 11, fill: "#6b7685" }, fmt.clock(now)));
  for (const s of series) {
    if (!s.points.length) continue;
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    chart.append(svg("path", { d, fill: "none", stroke: s.color, "stroke-width": 2, "stroke-linejoin": "round" }));
  }
  if (!all.length) {
    chart.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", "font-size": 13, fill: "#6b7685" }, "collecting samples…"));
  }
  root.append(chart);
  const legend = h("div", { class: "legend" });
  for (const s of series) {
    const last = s.points.length ? s.points[s.points.length - 1][1] : 0;
    legend.append(h("span", {}, h("i", { class: s.swatch }), `${s.label}: ${unit === "B" ? fmt.rate(last, "B") : unit === "/s" ? fmt.rate(last) : fmt.int(last)}`));
  }
  root.append(legend);
  return root;
}

function throughputCharts(points) {
  const pts = (key) => points.map((p) => [p.unix_ms, p[key]]);
  return h("div", { class: "charts" },
    lineChart("Records per second", [
      { label: "produced", color: COLORS.produce, swatch: "swatch-produce", points: pts("produce_records_per_sec") },
      { label: "fetched", color: COLORS.fetch, swatch: "swatch-fetch", points: pts("fetch_records_per_sec") },
    ], "/s", "chart-records"),
    lineChart("Bytes per second", [
      { label: "produced", color: COLORS.produce, swatch: "swatch-produce", points: pts("produce_bytes_per_sec") },
      { label: "fetched", color: COLORS.fetch, swatch: "swatch-fetch", points: pts("fetch_bytes_per_sec") },
    ], "B", "chart-bytes"),
    lagChart(points));
}

function lagChart(points) {
  const groups = [...new Set(points.flatMap((p) => p.group_lag.map(([g]) => g)))].slice(0, GROUP_COLORS.length);
  const series = [{ label: "total lag", color: COLORS.lag, swatch: "swatch-lag", points: points.map((p) => [p.unix_ms, p.total_lag]) }];
  groups.forEach((g, i) => {
    if (groups.length < 2) return; // one group: the total says it all
    series.push({
      label: g, color: GROUP_COLORS[i], swatch: `swatch-${i}`,
      points: points.map((p) => [p.unix_ms, (p.group_lag.find(([name]) => name === g) || [g, 0])[1]]),
    });
  });
  return lineChart("Consumer lag (records)", series, "", "chart-lag");
}

function table(headers, rows, id) {
  return h("table", { id },
    h("thead", {}, h("tr", {}, headers.map(([label, cls]) => h("th", { class: cls }, label)))),
    h("tbody", {}, rows));
}

const pages = {
  async overview(main) {
    const [o, series] = await Promise.all([api("/api/overview"), api("/api/series")]);
    const now = o.now || {};
    main.replaceChildren(
      h("h1", {}, "Overview"),
      h("div", { class: "cards" },
        card("Version", `Tarn ${o.version}`, `node ${o.node_id}`, "card-version"),
        card("Uptime", fmt.duration(o.uptime_seconds), `since ${fmt.time(o.started_unix_ms)}`, "card-uptime"),
        card("Topics", fmt.int(o.topics), `${fmt.int(o.partitions)} partitions`, "card-topics"),
        card("Records", fmt.int(o.records), "in all partition logs", "card-records"),
        card("Disk use", fmt.bytes(o.log_bytes), "segment files", "card-disk"),
        card("Produce now", fmt.rate(now.produce_records_per_sec || 0), fmt.rate(now.produce_bytes_per_sec || 0, "B"), "card-produce"),
        card("Fetch now", fmt.rate(now.fetch_records_per_sec || 0), fmt.rate(now.fetch_bytes_per_sec || 0, "B"), "card-fetch"),
        card("Connections", fmt.int(o.connections), `${fmt.int(o.groups)} groups, lag ${fmt.int(o.total_lag)}`, "card-connections"),
      ),
      h("h2", {}, "Brokers"),
      table([["Broker", "num"], ["Address"], ["Rack"], ["State"], ["Leads", "num"], ["Replicas", "num"]],
        o.brokers.map((b) => h("tr", { "data-broker": b.id },
          h("td", { class: "num" }, b.id),
          h("td", { class: "mono" }, `${b.host}:${b.port}`),
          h("td", {}, b.rack || "—"),
          h("td", {}, b.fenced ? h("span", { class: "pill warn" }, "fenced") : "serving",
            b.controller ? h("span", { class: "pill" }, "controller") : null),
          h("td", { class: "num" }, fmt.int(b.leader_partitions)),
          h("td", { class: "num" }, fmt.int(b.replica_partitions)),
        )), "brokers-table"),
      h("h2", {}, "Throughput and lag"),
      throughputCharts(series.points),
      h("p", { class: "muted" }, `Cluster ${o.cluster_id} · data in ${o.data_dir} · a point every ${series.interval_ms / 1000} s, last ${Math.round(series.points.length * series.interval_ms / 60000)} min`),
    );
  },

  async topics(main) {
    const topics = await api("/api/topics");
    const rows = topics.map((t) => h("tr", { "data-topic": t.name },
      h("td", {}, h("a", { href: `#/topic/${encodeURIComponent(t.name)}` }, t.name), t.internal ? h("span", { class: "pill" }, "internal") : null),
      h("td", { class: "num" }, t.partitions),
      h("td", { class: "num" }, t.replication_factor),
      h("td", { class: "num", "data-records": t.records }, fmt.int(t.records)),
      h("td", { class: "num" }, fmt.bytes(t.size_bytes)),
      h("td", { class: "num" }, fmt.int(t.traffic.records_in)),
      h("td", { class: "num" }, fmt.int(t.traffic.records_out)),
      h("td", {}, Object.entries(t.config_overrides).map(([k, v]) => h("span", { class: "pill" }, `${k}=${v}`))),
    ));
    main.replaceChildren(
      h("h1", {}, `Topics (${topics.length})`),
      topics.length
        ? table([["Topic"], ["Partitions", "num"], ["RF", "num"], ["Records", "num"], ["Size", "num"], ["Produced", "num"], ["Fetched", "num"], ["Config overrides"]], rows, "topics-table")
        : h("div", { class: "empty" }, "No topics yet."),
      h("p", { class: "muted" }, "Records = log end offset − log start offset, summed over partitions. Produced and fetched count records since the broker started."),
    );
  },

  async topic(main, name) {
    const t = await api(`/api/topic?name=${encodeURIComponent(name)}`);
    const partitionRows = t.partition_details.map((p) => h("tr", { "data-partition": p.partition },
      h("td", { class: "num" }, p.partition),
      h("td", { class: "num" }, p.leader),
      h("td", { class: "num" }, p.leader_epoch),
      h("td", { class: "num" }, p.log ? fmt.int(p.log.log_start_offset) : "—"),
      h("td", { class: "num" }, p.log ? fmt.int(p.log.log_end_offset) : "—"),
      h("td", { class: "num", "data-records": p.records }, fmt.int(p.records)),
      h("td", { class: "num" }, p.log ? fmt.bytes(p.log.size_bytes) : "—"),
      h("td", { class: "num" }, p.log ? p.log.segments : "—"),
      h("td", {}, `[${p.replicas.join(", ")}] / [${p.isr.join(", ")}]`,
        p.adding_replicas.length || p.removing_replicas.length
          ? h("span", { class: "pill warn" }, `moving: +[${p.adding_replicas.join(", ")}] −[${p.removing_replicas.join(", ")}]`)
          : null),
    ));
    const configRows = t.configs.map((c) => h("tr", {},
      h("td", { class: "mono" }, c.name), h("td", { class: "mono" }, c.value),
      h("td", {}, c.source === "default" ? h("span", { class: "muted" }, "default") : h("span", { class: "pill warn" }, c.source))));
    const partitionSelect = h("select", { id: "record-partition" },
      t.partition_details.map((p) => h("option", { value: p.partition }, `partition ${p.partition}`)));
    const limitSelect = h("select", { id: "record-limit" }, [10, 20, 50, 100, 200].map((n) => h("option", { value: n, selected: n === 20 }, `last ${n}`)));
    const recordsBox = h("div", { id: "records" });
    const load = () => loadRecords(recordsBox, t.name, partitionSelect.value, limitSelect.value);
    partitionSelect.addEventListener("change", load);
    limitSelect.addEventListener("change", load);
    main.replaceChildren(
      h("h1", {}, h("a", { href: "#/topics" }, "Topics"), " / ", h("span", { id: "topic-name" }, t.name)),
      h("div", { class: "cards" },
        card("Partitions", t.partitions, `replication factor ${t.replication_factor}`),
        card("Records", fmt.int(t.records), "end − start offsets", "card-topic-records"),
        card("Size", fmt.bytes(t.size_bytes), "segment files"),
        card("Produced", fmt.int(t.traffic.records_in), fmt.bytes(t.traffic.bytes_in)),
        card("Fetched", fmt.int(t.traffic.records_out), fmt.bytes(t.traffic.bytes_out)),
      ),
      h("p", { class: "muted mono" }, `topic id ${t.topic_id}`),
      h("h2", {}, "Partitions"),
      table([["Partition", "num"], ["Leader", "num"], ["Epoch", "num"], ["Start offset", "num"], ["End offset", "num"], ["Records", "num"], ["Size", "num"], ["Segments", "num"], ["Replicas / ISR"]], partitionRows, "partitions-table"),
      h("h2", {}, "Latest records"),
      h("div", { class: "controls" }, partitionSelect, limitSelect, h("button", { onclick: load }, "Refresh")),
      recordsBox,
      h("h2", {}, "Configs"),
      table([["Name"], ["Value"], ["Source"]], configRows, "configs-table"),
    );
    await load();
    return { keep: true };
  },

  async groups(main) {
    const [page, series] = await Promise.all([api("/api/groups"), api("/api/series")]);
    const body = page.groups.length ? page.groups.map((g) => h("div", { class: "group", "data-group": g.group_id },
      h("h2", {}, g.group_id, " ", h("span", { class: "pill" }, g.state || "offsets only"), g.protocol_type ? h("span", { class: "pill" }, g.protocol_type) : null,
        " ", h("span", { class: "muted", "data-total-lag": g.total_lag }, `total lag ${fmt.int(g.total_lag)}`)),
      g.members.length
        ? table([["Member"], ["Client id"], ["Host"], ["Assigned partitions"]], g.members.map((m) => h("tr", {},
          h("td", { class: "mono" }, m.member_id), h("td", {}, m.client_id), h("td", {}, m.client_host),
          h("td", {}, m.assignment.map(([topic, p]) => h("span", { class: "pill" }, `${topic}-${p}`))))))
        : h("p", { class: "muted" }, "No active members."),
      h("p", {}),
      table([["Topic"], ["Partition", "num"], ["Committed offset", "num"], ["Log end offset", "num"], ["Lag", "num"]], g.partitions.map((l) => h("tr", { "data-lag": l.lag },
        h("td", {}, h("a", { href: `#/topic/${encodeURIComponent(l.topic)}` }, l.topic)), h("td", { class: "num" }, l.partition),
        h("td", { class: "num" }, fmt.int(l.committed_offset)), h("td", { class: "num" }, fmt.int(l.log_end_offset)),
        h("td", { class: "num" }, fmt.int(l.lag))))),
    )) : [h("div", { class: "empty", id: "no-groups" }, "No consumer groups yet. Groups appear here with their members and per-partition lag once consumers commit offsets.")];
    main.replaceChildren(h("h1", {}, `Consumer groups (${page.groups.length})`), h("div", { class: "charts" }, lagChart(series.points)), ...body);
  },
};

async function loadRecords(box, topic, partition, limit) {
  box.replaceChildren(h("p", { class: "muted" }, "Loading records…"));
  try {
    const page = await api(`/api/records?topic=${encodeURIComponent(topic)}&partition=${partition}&limit=${limit}`);
    const show = (p) => p === null || p === undefined ? h("span", { class: "muted" }, "null")
      : [p.text, p.encoding === "hex" ? h("span", { class: "pill" }, "hex") : null,
        p.truncated ? h("span", { class: "pill warn" }, `${fmt.bytes(p.size)}, cut`) : null];
    const rows = page.rows.map((r) => r.kind === "batch"
      ? h("tr", { class: "batch" }, h("td", { class: "num" }, `${r.base_offset}–${r.last_offset}`), h("td", { colspan: 4, class: "muted" }, `${r.records} records: ${r.note}`))
      : h("tr", { "data-offset": r.offset },
        h("td", { class: "num" }, r.offset),
        h("td", {}, fmt.time(r.timestamp), h("span", { class: "muted" }, ` ${r.timestamp_type}`)),
        h("td", { class: "mono" }, show(r.key)),
        h("td", { class: "mono" }, show(r.value)),
        h("td", {}, r.headers.map(([k, v]) => h("span", { class: "pill" }, `${k}=${v ? v.text : "null"}`)))));
    box.replaceChildren(
      h("p", { class: "muted" }, `${topic}-${partition}: offsets ${fmt.int(page.log_start_offset)} to ${fmt.int(page.log_end_offset)}; showing from ${fmt.int(page.from_offset)}${page.incomplete ? " (read limit reached)" : ""}`),
      page.rows.length ? table([["Offset", "num"], ["Timestamp"], ["Key"], ["Value"], ["Headers"]], rows, "records-table") : h("div", { class: "empty" }, "This partition is empty."));
  } catch (e) {
    box.replaceChildren(h("p", { class: "error" }, String(e.message || e)));
  }
}

async function render() {
  const token = ++pageToken;
  clearTimeout(refreshTimer);
  const main = document.getElementById("app");
  const hash = location.hash.replace(/^#\/?/, "");
  const [page, ...rest] = hash.split("/");
  const name = page || "overview";
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.dataset.page === (name === "topic" ? "topics" : name));
  }
  const handler = pages[name];
  if (!handler) {
    main.replaceChildren(h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/" }, "Back to the overview")));
    return;
  }
  try {
    const result = await handler(main, decodeURIComponent(rest.join("/")));
    if (token !== pageToken) return;
    document.body.dataset.loaded = name;
    // The topic page keeps its record view; the others refresh themselves.
    if (!(result && result.keep)) refreshTimer = setTimeout(render, name === "overview" ? 2000 : 5000);
  } catch (e) {
    if (token !== pageToken) return;
    main.replaceChildren(h("h1", {}, "Error"), h("p", { class: "error" }, String(e.message || e)));
    refreshTimer = setTimeout(render, 5000);
  }
}

async function header() {
  try {
    const o = await api("/api/overview");
    document.getElementById("cluster").textContent = `cluster ${o.cluster_id} · node ${o.node_id} · Tarn ${o.version}`;
  } catch (e) {
    document.getElementById("cluster").textContent = "broker unreachable";
  }
}

window.addEventListener("hashchange", render);
header();
render();
