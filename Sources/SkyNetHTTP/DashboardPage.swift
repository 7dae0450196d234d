/// The dashboard at `/`: one page, its HTML, CSS and JavaScript in the binary (no CDN, no build
/// chain). It listens to `/events` (server-sent events, one status a second) and draws the book's
/// three indicators, each worker with its slots as lights, throughput and failures over the last
/// minutes, and the queue by kind.
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
          .state.lost { background: var(--bad); }
          .state.draining { background: var(--busy); color: #111; }
          .state.ready { background: var(--ok); color: #111; }
          canvas { width: 100%; height: 160px; }
          .legend { color: var(--dim); font-size: 12px; }
          .legend i { display: inline-block; width: 10px; height: 3px; margin: 0 4px 3px 10px; vertical-align: middle; }
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
              <div class="indicator"><b id="failed">–</b><span>failed attempts</span></div>
            </div>
          </section>
          <section>
            <h2>Queue</h2>
            <div class="indicators">
              <div class="indicator"><b id="queued">–</b><span>queued</span></div>
              <div class="indicator"><b id="leased">–</b><span>running</span></div>
              <div class="indicator"><b id="requeued">–</b><span>requeued</span></div>
              <div class="indicator"><b id="coordinators">–</b><span>coordinators</span></div>
            </div>
            <table id="kinds"></table>
          </section>
          <section style="grid-column: 1 / -1">
            <h2>Workers</h2>
            <table><thead><tr><th>worker</th><th>state</th><th>slots</th><th>running</th><th>done</th><th>failed</th><th>memory</th><th>CPU</th><th>heard</th><th>kinds</th></tr></thead>
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
        function render(view) {
          const s = view.status;
          $("broker").textContent = "epoch " + s.epoch;
          $("scheduled").textContent = fmt(view.scheduled);
          $("rate").textContent = fmt(Math.round(view.per_second));
          $("completed").textContent = fmt(view.completed);
          $("failed").textContent = fmt(view.failed);
          $("queued").textContent = fmt(s.queued);
          $("leased").textContent = fmt(s.leased);
          $("requeued").textContent = fmt(s.requeued);
          $("coordinators").textContent = fmt(s.coordinators);
          const kinds = $("kinds"); kinds.replaceChildren();
          for (const [kind, depth] of Object.entries(s.queuedByKind)) { const r = kinds.insertRow(); cell(r, kind); cell(r, fmt(depth)); }
          const body = $("workers"); body.replaceChildren();
          for (const w of s.workers) {
            const row = body.insertRow(); row.dataset.worker = w.name; row.className = "worker";
            cell(row, w.name);
            cell(row, "").innerHTML = '<span class="state ' + (w.draining ? "draining" : "ready") + '">' + (w.draining ? "draining" : "ready") + "</span>";
            const lights = cell(row, "");
            for (let i = 0; i < w.slots; i++) { const dot = document.createElement("span"); dot.className = "slot" + (i < w.leased ? " busy" : ""); lights.appendChild(dot); }
            cell(row, w.leased + " / " + w.slots);
            const f = w.figures;
            cell(row, f ? fmt(f.done) : "–", "done"); cell(row, f ? fmt(f.failed) : "–", "failed");
            cell(row, f ? Math.round(f.residentBytes / 1048576) + " MiB" : "–");
            cell(row, f ? f.cpuSeconds.toFixed(1) + " s" : "–");
            cell(row, w.lastHeardMilliseconds == null ? "–" : (w.lastHeardMilliseconds / 1000).toFixed(1) + " s ago");
            cell(row, w.kinds.join(", "));
          }
          for (const lost of view.lost_workers) {
            const row = body.insertRow(); row.dataset.worker = lost.name; row.className = "worker lost";
            cell(row, lost.name);
            cell(row, "").innerHTML = '<span class="state lost">lost</span>';
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
