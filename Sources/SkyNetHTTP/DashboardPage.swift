/// The dashboard at `/`: one page, its HTML, CSS and JavaScript in the binary (no CDN, no build
/// chain). It listens to `/events` (server-sent events, one status a second) and draws the book's
/// three indicators, each worker with its slots as lights, throughput and failures over the last
/// minutes, the queue by kind (depth, oldest task, wait and run time), and the jobs with their
/// progress and dead letters.
enum DashboardPage {
    static let html = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>SkyNet</title>
        <style>
          :root { --bg: #0b1020; --panel: #141b33; --text: #e6e9f2; --dim: #8a93b2; --busy: #f5b942;
                  --free: #2a3354; --ok: #4cc38a; --bad: #e5484d; --line: #6e8bff; }
          * { box-sizing: border-box; }
          body { margin: 0; font: 15px/1.4 system-ui, sans-serif; background: var(--bg); color: var(--text); }
          header { display: flex; align-items: baseline; gap: 1em; padding: 14px 24px; border-bottom: 1px solid var(--free); }
          header h1 { margin: 0; font-size: 20px; letter-spacing: .04em; }
          #connection { color: var(--dim); font-size: 13px; }
          #connection.live { color: var(--ok); }
          main { padding: 18px 24px; display: grid; gap: 18px; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); }
          section { background: var(--panel); border-radius: 10px; padding: 14px 18px; }
          h2 { margin: 0 0 10px; font-size: 13px; text-transform: uppercase; letter-spacing: .08em; color: var(--dim); }
          .indicators { display: flex; gap: 28px; }
          .indicator b { display: block; font-size: 34px; font-variant-numeric: tabular-nums; }
          .indicator span { color: var(--dim); font-size: 13px; }
          table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
          td, th { text-align: left; padding: 5px 6px; border-bottom: 1px solid var(--free); }
          th { color: var(--dim); font-weight: normal; font-size: 13px; }
          .slot { display: inline-block; width: 12px; height: 12px; margin-right: 3px; border-radius: 50%; background: var(--free); }
          .slot.busy { background: var(--busy); box-shadow: 0 0 6px var(--busy); }
          .state { font-size: 12px; padding: 1px 7px; border-radius: 8px; background: var(--free); }
          .state.lost, .state.shared { background: var(--bad); }
          .state.draining { background: var(--busy); color: #111; }
          .state.ready { background: var(--ok); color: #111; }
          canvas { width: 100%; height: 160px; }
          .legend { color: var(--dim); font-size: 12px; }
          .legend i { display: inline-block; width: 10px; height: 3px; margin: 0 4px 3px 10px; vertical-align: middle; }
          .state.running { background: var(--line); color: #111; }
          .state.finished { background: var(--ok); color: #111; }
          .state.left, .state.cancelling { background: var(--bad); }
          .bar { position: relative; width: 180px; height: 14px; border-radius: 7px; background: var(--free); overflow: hidden; display: inline-block; vertical-align: middle; }
          .bar i { position: absolute; top: 0; bottom: 0; left: 0; background: var(--ok); }
          .bar i.bad { background: var(--bad); }
          .pct { display: inline-block; width: 4.5em; text-align: right; margin-left: 6px; }
          .dead td { color: var(--dim); font-size: 13px; border-bottom: none; padding-top: 0; }
          .dead code { color: var(--bad); }
          .note { color: var(--dim); font-size: 13px; margin-top: 8px; }
        </style>
        </head>
        <body>
        <header><h1>SkyNet</h1><span id="broker"></span><span id="connection">connecting…</span></header>
        <main>
          <section>
            <h2>Scan</h2>
            <div class="indicators">
              <div class="indicator"><b id="scheduled">–</b><span>scheduled</span></div>
              <div class="indicator"><b id="rate">–</b><span>per second</span></div>
              <div class="indicator"><b id="completed">–</b><span>completed</span></div>
              <div class="indicator"><b id="failed">–</b><span>failed</span></div>
              <div class="indicator"><b id="cancelled">–</b><span>cancelled</span></div>
            </div>
            <p class="note" id="attempts" title="Each attempt at the broker: they add up to what it accepted. The tasks above are as their jobs count them, local retries included.">–</p>
          </section>
          <section>
            <h2>Queue</h2>
            <div class="indicators">
              <div class="indicator"><b id="queued">–</b><span>queued</span></div>
              <div class="indicator"><b id="leased">–</b><span>running</span></div>
              <div class="indicator"><b id="requeued">–</b><span>requeued</span></div>
              <div class="indicator"><b id="coordinators">–</b><span>coordinators</span></div>
            </div>
            <table><thead><tr><th>kind</th><th>queued</th><th>oldest</th><th>wait p50 / p95</th><th>run p50 / p95</th><th>results</th></tr></thead>
            <tbody id="kinds"></tbody></table>
            <div class="note" id="journal"></div>
          </section>
          <section style="grid-column: 1 / -1">
            <h2>Jobs</h2>
            <table><thead><tr><th>job</th><th>state</th><th>progress</th><th>tasks</th><th>completed</th><th>failed</th><th>cancelled</th><th>cached</th><th>at broker</th><th>time</th></tr></thead>
            <tbody id="jobs"></tbody></table>
            <div class="note" id="nojobs">No jobs yet: <code>skynet submit</code> one, or detach one with <code>--detach</code>.</div>
          </section>
          <section style="grid-column: 1 / -1">
            <h2>Workers</h2>
            <table><thead><tr><th>worker</th><th>host</th><th>state</th><th>slots</th><th>running</th><th>done</th><th>failed</th><th>memory</th><th>CPU</th><th>heard</th><th>kinds</th></tr></thead>
            <tbody id="workers"></tbody></table>
          </section>
          <section style="grid-column: 1 / -1">
            <h2>Last minutes</h2>
            <canvas id="chart" width="1200" height="160"></canvas>
            <div class="legend"><i style="background: var(--line)"></i>completed/s<i style="background: var(--bad)"></i>failed/s<i style="background: var(--busy)"></i>queued</div>
          </section>
        </main>
        <script>
        "use strict";
        const token = new URLSearchParams(location.search).get("token");
        const suffix = token ? "?token=" + encodeURIComponent(token) : "";
        const $ = (id) => document.getElementById(id);
        const fmt = (n) => Number(n).toLocaleString("en");
        function cell(row, text, cls) { const td = row.insertCell(); td.textContent = text; if (cls) td.className = cls; return td; }
        const BOUNDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600];
        function quantile(h, q) {
          if (!h || !h.count) return null;
          const wanted = Math.max(1, Math.ceil(h.count * q)); let total = 0;
          for (let i = 0; i < h.buckets.length; i++) { total += h.buckets[i]; if (total >= wanted) return i < BOUNDS.length ? BOUNDS[i] : Infinity; }
          return Infinity;
        }
        function secs(x) {
          if (x == null) return "–";
          if (x === Infinity) return "> 1 h";
          if (x < 1) return Math.round(x * 1000 * 10) / 10 + " ms";
          if (x < 120) return (x < 10 ? x.toFixed(1) : Math.round(x)) + " s";
          return Math.round(x / 60) + " min";
        }
        // A quantile from the buckets: at most the bucket's bound.
        const bound = (x) => x == null ? "–" : x === Infinity ? "> 1 h" : "≤ " + secs(x);
        const ago = (x) => x < 120 ? x.toFixed(0) + " s" : Math.round(x / 60) + " min";
        function badge(td, state) { const b = document.createElement("span"); b.className = "state " + state; b.textContent = state; td.appendChild(b); }
        function jobs(list) {
          const body = $("jobs"); body.replaceChildren();
          $("nojobs").style.display = list.length ? "none" : "";
          for (const j of list) {
            const row = body.insertRow(); row.className = "job"; row.dataset.job = j.id; row.dataset.state = j.state;
            cell(row, j.name + (j.detached ? " " + j.id.slice(0, 8) : "")).title = j.id;
            badge(cell(row, ""), j.state);
            const done = j.completed + j.failed + j.cancelled, pct = j.tasks ? Math.floor(done * 100 / j.tasks) : 0;
            const bar = document.createElement("span"); bar.className = "bar";
            const ok = document.createElement("i"); ok.style.width = (j.tasks ? j.completed * 100 / j.tasks : 0) + "%";
            const bad = document.createElement("i"); bad.className = "bad"; bad.style.left = ok.style.width; bad.style.width = (j.tasks ? (j.failed + j.cancelled) * 100 / j.tasks : 0) + "%";
            bar.append(ok, bad);
            const p = cell(row, ""); p.append(bar); const label = document.createElement("span"); label.className = "pct progress"; label.textContent = pct + "%"; p.append(label);
            cell(row, fmt(j.tasks)); cell(row, fmt(j.completed), "completed"); cell(row, fmt(j.failed), "failed"); cell(row, fmt(j.cancelled));
            cell(row, fmt(j.from_cache)); cell(row, fmt(j.at_broker));
            cell(row, j.ended_seconds_ago != null ? "ended " + ago(j.ended_seconds_ago) + " ago" : j.elapsed_seconds != null ? ago(j.elapsed_seconds) : "–");
            for (const d of j.dead_letters) {
              const dead = body.insertRow(); dead.className = "dead";
              const td = cell(dead, ""); td.colSpan = 10;
              td.append("dead letter " + d.task.slice(0, 8) + ": ");
              const code = document.createElement("code"); code.textContent = d.error; td.append(code);
            }
          }
        }
        function render(view) {
          const s = view.status;
          $("broker").textContent = "epoch " + s.epoch;
          $("scheduled").textContent = fmt(view.scheduled);
          $("rate").textContent = fmt(Math.round(view.per_second));
          $("completed").textContent = fmt(view.completed);
          $("failed").textContent = fmt(view.failed);
          $("cancelled").textContent = fmt(view.cancelled);
          $("attempts").textContent = "At the broker: " + fmt(s.submitted + s.recovered) + " accepted = " + fmt(s.results_completed) + " completed + " + fmt(s.results_failed) + " failed + " + fmt(s.results_cancelled) + " cancelled + " + fmt(s.queued + s.leased) + " in flight";
          $("queued").textContent = fmt(s.queued);
          $("leased").textContent = fmt(s.leased);
          $("requeued").textContent = fmt(s.requeued);
          $("coordinators").textContent = fmt(s.coordinators);
          const kinds = $("kinds"); kinds.replaceChildren();
          for (const [kind, k] of Object.entries(s.kinds).sort()) {
            const r = kinds.insertRow(); r.dataset.kind = kind;
            cell(r, kind); cell(r, fmt(k.queued), "queued"); cell(r, k.queued ? secs(k.oldest_queued_seconds) : "–", "oldest");
            cell(r, bound(quantile(k.queue_wait, 0.5)) + " / " + bound(quantile(k.queue_wait, 0.95)));
            cell(r, bound(quantile(k.run_time, 0.5)) + " / " + bound(quantile(k.run_time, 0.95)));
            cell(r, fmt(k.run_time.count));
          }
          const j = s.journal_commit;
          $("journal").textContent = j ? "Journal: " + fmt(j.count) + " group commits, p50 " + bound(quantile(j, 0.5)) + ", p99 " + bound(quantile(j, 0.99)) : "No journal (not durable).";
          jobs(s.jobs);
          const body = $("workers"); body.replaceChildren();
          for (const w of s.workers) {
            const row = body.insertRow(); row.dataset.worker = w.name; row.className = "worker";
            cell(row, w.name); cell(row, w.figures ? w.figures.host : "–", "host");
            const state = cell(row, ""); badge(state, w.draining ? "draining" : "ready");
            if (w.shared_key) { badge(state, "shared key"); state.title = "another live worker holds key " + w.key + "…: a copied secret?"; }
            const lights = cell(row, "");
            for (let i = 0; i < w.slots; i++) { const dot = document.createElement("span"); dot.className = "slot" + (i < w.leased ? " busy" : ""); lights.appendChild(dot); }
            cell(row, w.leased + " / " + w.slots + (w.lent > 0 ? " (+" + w.lent + " lent)" : ""));
            const f = w.figures;
            cell(row, f ? fmt(f.done) : "–", "done"); cell(row, f ? fmt(f.failed) : "–", "failed");
            cell(row, f ? Math.round(f.resident_bytes / 1048576) + " MiB" : "–");
            cell(row, f ? f.cpu_seconds.toFixed(1) + " s" : "–");
            cell(row, w.last_heard_milliseconds == null ? "–" : (w.last_heard_milliseconds / 1000).toFixed(1) + " s ago");
            cell(row, w.kinds.join(", "));
          }
          for (const lost of view.lost_workers) {
            const row = body.insertRow(); row.dataset.worker = lost.name; row.className = "worker lost";
            cell(row, lost.name); cell(row, lost.host || "–", "host");
            badge(cell(row, ""), "lost");
            cell(row, ""); cell(row, "lost " + new Date(lost.time * 1000).toLocaleTimeString());
            for (let i = 0; i < 6; i++) cell(row, "");
          }
          chart(view.history);
        }
        function chart(history) {
          const canvas = $("chart"), g = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
          g.clearRect(0, 0, w, h);
          if (history.length < 2) return;
          const rates = [];
          for (let i = 1; i < history.length; i++) {
            const dt = Math.max(history[i].time - history[i - 1].time, 0.001);
            rates.push({ ok: (history[i].completed - history[i - 1].completed) / dt, bad: (history[i].failed - history[i - 1].failed) / dt, queued: history[i].queued });
          }
          const top = Math.max(1, ...rates.map((r) => Math.max(r.ok, r.bad, r.queued)));
          const line = (key, color) => {
            g.strokeStyle = color; g.lineWidth = 2; g.beginPath();
            rates.forEach((r, i) => { const x = (i / Math.max(rates.length - 1, 1)) * (w - 8) + 4, y = h - 6 - (r[key] / top) * (h - 16); i ? g.lineTo(x, y) : g.moveTo(x, y); });
            g.stroke();
          };
          const css = getComputedStyle(document.documentElement);
          line("queued", css.getPropertyValue("--busy")); line("bad", css.getPropertyValue("--bad")); line("ok", css.getPropertyValue("--line"));
          g.fillStyle = css.getPropertyValue("--dim"); g.font = "12px system-ui"; g.fillText(fmt(Math.round(top)), 6, 14);
        }
        function connect() {
          const events = new EventSource("/events" + suffix);
          events.onopen = () => { $("connection").textContent = "live"; $("connection").className = "live"; };
          events.onmessage = (message) => { const view = JSON.parse(message.data); if (view.status) render(view); };
          events.onerror = () => { $("connection").textContent = "reconnecting…"; $("connection").className = ""; };
        }
        connect();
        </script>
        </body>
        </html>
        """#
}
