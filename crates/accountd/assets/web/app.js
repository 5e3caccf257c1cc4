// The status page: reads /web/api/me (a user's view) or /web/api/admin (#admin) and draws it. Only
// text is ever put into the page (textContent), never HTML: user names and reasons are data.
// Amounts come as exact decimal strings (schema 1, the shape of `sbalance --json`): shown as they
// are, turned into numbers only to draw and sort.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text == null ? "" : String(text);
  if (className) td.className = className;
  return td;
}

function fill(tableId, rows, columns) {
  const body = $(tableId).tBodies[0];
  const fragment = document.createDocumentFragment();
  for (const r of rows) {
    const tr = document.createElement("tr");
    for (const [value, className] of columns(r)) cell(tr, value, className);
    fragment.appendChild(tr);
  }
  body.replaceChildren(fragment);
}

function show(message) {
  $("message").textContent = message;
  $("message").hidden = false;
}

async function load(url) {
  const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
  const body = await response.json().catch(() => ({ error: "accountd answered " + response.status }));
  if (!response.ok) throw new Error(body.error || "accountd answered " + response.status);
  return body;
}

let me = null;
let chartDays = 30;

function drawChart() {
  const svg = $("chart");
  svg.replaceChildren();
  $("chart-days").textContent = chartDays;
  const now = me.now_unix;
  const since = now - chartDays * 86400;
  // The balance at the window's start is the one after the last entry before it.
  const chart = me.chart.map((p) => ({ at: p.at_unix, balance: Number(p.balance) }));
  const before = chart.filter((p) => p.at < since);
  const points = chart.filter((p) => p.at >= since);
  const balance = Number(me.balance), floor = Number(me.floor);
  const start = before.length ? before[before.length - 1].balance : (points.length ? points[0].balance : balance);
  const series = [{ at: since, balance: start }, ...points, { at: now, balance }];
  const values = series.map((p) => p.balance).concat([0, floor]);
  const low = Math.min(...values), high = Math.max(...values);
  const span = high - low || 1;
  const x = (at) => 40 + ((at - since) / (now - since)) * 750;
  const y = (v) => 220 - ((v - low) / span) * 200;
  const line = (cls, v) => {
    const l = document.createElementNS(SVG, "line");
    l.setAttribute("class", cls);
    l.setAttribute("x1", 40); l.setAttribute("x2", 790);
    l.setAttribute("y1", y(v)); l.setAttribute("y2", y(v));
    svg.appendChild(l);
    const t = document.createElementNS(SVG, "text");
    t.setAttribute("x", 2); t.setAttribute("y", y(v) + 4);
    t.textContent = String(v);
    svg.appendChild(t);
  };
  line("zero", 0);
  line("floor", floor);
  // A step line: the balance holds until the next entry changes it.
  let d = "";
  series.forEach((p, i) => {
    if (i === 0) d += `M${x(p.at).toFixed(1)},${y(p.balance).toFixed(1)}`;
    else d += ` H${x(p.at).toFixed(1)} V${y(p.balance).toFixed(1)}`;
  });
  const path = document.createElementNS(SVG, "path");
  path.setAttribute("class", "line");
  path.setAttribute("d", d);
  path.setAttribute("data-points", String(series.length));
  svg.appendChild(path);
}

function showUser(view) {
  me = view;
  $("user-name").textContent = view.user;
  $("balance").textContent = view.balance;
  $("status").textContent = view.status;
  $("status").className = "big status-" + view.status;
  $("floor").textContent = view.floor;
  $("next-grant").textContent = view.next_grant ? `+${view.next_grant.amount} on ${view.next_grant.date}` : "none";
  // What the status means, in the server's words (the same as sbatch's line and sbalance's).
  let text = view.explanation;
  if (view.recovers) text += ` Replenishment alone ends this on ${view.recovers}.`;
  $("status-text").textContent = text;
  // A grant about to end: the same words as sbatch's line.
  $("expiring").textContent = view.expiring ? `${view.expiring.tokens} tokens of a grant expire at ${view.expiring.at}.` : "";
  $("expiring").hidden = !view.expiring;
  // The rate is what jobs were charged (net of refunds): an admin's adjustment or grant is no spending.
  const days = view.forecast.window_days;
  $("forecast").textContent = view.forecast.floor_on
    ? `At the last ${days} days' rate you reach the floor on ${view.forecast.floor_on}.`
    : Number(view.balance) <= Number(view.floor)
      ? "You are at the floor."
      : `Your jobs spent no tokens over the last ${days} days: no date to forecast.`;
  // What this month's charges spent on idle GPUs (below the site's utilization threshold for its idle window).
  const idle = view.idle_month;
  const spentIdle = idle && Number(idle.tokens) > 0;
  $("idle").textContent = spentIdle
    ? `You spent ${idle.tokens} tokens on idle GPUs this month (${idle.per_type.map((t) => `${t.gpu_type} ${t.tokens}`).join(", ")}).`
    : "";
  $("idle").hidden = !spentIdle;
  // The GPU energy of this month's jobs, where node agents measured it (NVML's energy counters).
  const energy = view.energy_month;
  $("energy").textContent = energy && energy.kwh !== null ? `Your jobs' GPUs used ${energy.kwh} kWh this month.` : "";
  $("energy").hidden = !(energy && energy.kwh !== null);
  // Shadow mode: this user's submissions the plugins would have refused (nothing was enforced).
  const shadow = view.shadow;
  if (shadow) {
    const count = Object.values(shadow.refused).reduce((s, n) => s + n, 0);
    $("shadow-user").textContent = `gputokens is in shadow mode: nothing is enforced yet. ${count === 0 ? "None" : count} of ${view.user}'s GPU jobs would have been refused.`;
  }
  $("shadow-user").hidden = !shadow;
  fill("per-type", Object.entries(view.used_30d), ([gpuType, tokens]) => [[gpuType], [tokens, "num"]]);
  fill("events", view.events, (e) => [[e.at], [e.event], [e.what], [e.why]]);
  fill("jobs", view.jobs, (j) => [[j.job], [j.last_charged], [j.gpu_types.join(", ")], [j.tokens, "num"], [j.kwh_month ?? "", "num"]]);
  // The account pools the viewer may see: a row per pool, its members (theirs alone for a member) under it.
  const pools = view.pools || [];
  const poolRows = pools.flatMap((p) => [
    [[p.account], [""], [p.balance, "num"], [p.status], [p.members.reduce((s, m) => s + Number(m.spent_month), 0).toString(), "num"],
     [p.user_limit || "", "num"], [p.coordinators.join(", ")]],
    ...p.members.map((m) => [[""], [m.user], ["", "num"], [""], [m.spent_month, "num"], [p.user_limit || "", "num"], [""]]),
  ]);
  fill("pools", poolRows, (r) => r);
  $("pools-view").hidden = pools.length === 0;
  drawChart();
  $("user-view").hidden = false;
}

let users = [];
let sortKey = "user", sortDir = 1;

function drawUsers() {
  const needle = $("filter").value.trim().toLowerCase();
  const shown = needle ? users.filter((u) => u.user.toLowerCase().includes(needle) || u.status === needle) : users.slice();
  // Balances are decimal strings: compared as numbers.
  const key = (u) => (sortKey === "balance" ? Number(u.balance) : u[sortKey]);
  shown.sort((a, b) => (key(a) < key(b) ? -sortDir : key(a) > key(b) ? sortDir : 0));
  fill("users", shown, (u) => [[u.user], [u.balance, "num"], [u.status]]);
  $("shown").textContent = `${shown.length} of ${users.length} users`;
  for (const th of $("users").tHead.rows[0].cells) {
    if (th.dataset.key === sortKey) th.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending");
    else th.removeAttribute("aria-sort");
  }
}

function showAdmin(view) {
  users = view.users;
  $("cycles").replaceChildren(...view.cycles.cycles.map((c) => {
    const card = document.createElement("div");
    card.className = "card";
    const label = document.createElement("span");
    label.className = "label";
    label.textContent = `${c.cycle} cycle`;
    const value = document.createElement("span");
    value.textContent = c.last_success
      ? `last ok ${c.last_success} (${c.ago_seconds} s ago), took ${c.seconds == null ? "?" : c.seconds.toFixed(2)} s, ${c.failures} failed`
      : `no successful cycle yet, ${c.failures} failed`;
    card.append(label, value);
    return card;
  }));
  $("waiting").textContent = view.waiting_gpu_jobs
    ? `${view.waiting_gpu_jobs.jobs} GPU jobs waiting (squeue at ${view.waiting_gpu_jobs.as_of}).`
    : "The queue was not read in the last cycle.";
  fill("usage", Object.entries(view.usage_30d), ([gpuType, tokens]) => [[gpuType], [tokens, "num"]]);
  fill("preemptions", view.preemptions, (p) => [[p.at], [p.action + (p.dry_run ? " (dry run)" : "")], [p.job], [p.user], [p.reason]]);
  showShadow(view.shadow);
  fill("drained", view.drained, (f) => [[f.at], [f.node], [f.gpu], [f.cause]]);
  drawUsers();
  $("admin-view").hidden = false;
}

// Shadow mode on the admins' page: each controller's would-be decisions, and whose submissions it
// would have refused, most first.
function showShadow(shadow) {
  $("shadow-view").hidden = !shadow;
  if (!shadow) return;
  $("shadow-text").textContent = shadow.enforce
    ? "accountd enforces, but these controllers' plugins are in shadow mode (their config says enforce = false)."
    : (shadow.controllers.length
      ? "[admission] enforce = false: no GPU job is refused, deprioritized or held. What the plugins would have done:"
      : "[admission] enforce = false: no controller's plugin has reported what it would have done yet.");
  const when = (t) => new Date(t * 1000).toLocaleString();
  const would = (c, d) => [String(c.would[d] || 0), "num"];
  fill("shadow-controllers", shadow.controllers, (c) => [[c.controller], [when(c.since)], would(c, "refuse"), would(c, "deprioritize"), would(c, "limit")]);
  const refused = Object.entries(shadow.refused).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  fill("shadow-refused", refused, ([user, n]) => [[user], [String(n), "num"]]);
}

async function main() {
  $("days-30").addEventListener("click", () => { chartDays = 30; drawChart(); });
  $("days-90").addEventListener("click", () => { chartDays = 90; drawChart(); });
  $("filter").addEventListener("input", drawUsers);
  for (const th of $("users").tHead.rows[0].cells) {
    th.addEventListener("click", () => {
      sortDir = sortKey === th.dataset.key ? -sortDir : 1;
      sortKey = th.dataset.key;
      drawUsers();
    });
  }
  window.addEventListener("hashchange", () => location.reload());
  try {
    const asked = new URLSearchParams(location.search).get("user");
    const admin = location.hash === "#admin";
    const view = await load(admin ? "/web/api/admin" : "/web/api/me" + (asked ? "?user=" + encodeURIComponent(asked) : ""));
    $("viewer").textContent = view.viewer.name + (view.viewer.admin ? " (admin)" : "");
    $("nav-admin").hidden = !view.viewer.admin;
    $("nav").hidden = false;
    if (admin) showAdmin(view); else showUser(view);
    document.body.dataset.loaded = "true";
    // Milliseconds from the navigation's start to the page drawn with its data (bench/web.sh).
    document.body.dataset.loadedMs = performance.now().toFixed(1);
  } catch (e) {
    show(e.message);
    document.body.dataset.loaded = "error";
  }
}

main();
