"""The stylesheet embedded in every HTML report: light, readable, print-friendly.

System fonts only (nothing to download), tabular figures in tables, callout colours from
the same Okabe–Ito palette as the charts, and print rules that keep figures, tables and
callouts whole on a page.
"""

STYLESHEET = """
:root{--ink:#1f2328;--muted:#59636e;--line:#d8dee4;--soft:#f6f8fa}
*{box-sizing:border-box}
body{margin:0;background:#fff;color:var(--ink);
font:15px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif}
.page{max-width:1240px;margin:0 auto;padding:32px 24px 40px}
.page p,.page dl,.callout{max-width:980px}
h1{font-size:28px;line-height:1.25;margin:0 0 4px}
.subtitle{color:var(--muted);margin:0 0 8px}
h2{font-size:21px;margin:40px 0 12px;padding-bottom:6px;border-bottom:1px solid var(--line)}
a{color:#005d99}
p{margin:10px 0}
nav.toc{background:var(--soft);border:1px solid var(--line);border-radius:8px;
padding:12px 20px;margin:24px 0}
nav.toc h2{font-size:12px;text-transform:uppercase;letter-spacing:.08em;color:var(--muted);
border:0;margin:0 0 4px;padding:0}
nav.toc ol{margin:0;padding-left:22px;columns:2;column-gap:32px}
nav.toc li{break-inside:avoid}
.table-wrap{overflow-x:auto;margin:12px 0 20px}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{padding:6px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
thead th{background:var(--soft);font-weight:600;border-bottom:2px solid var(--line)}
tbody tr:nth-child(even){background:#fafbfc}
.r{text-align:right}.c{text-align:center}
td.r{white-space:nowrap}
td.empty{color:var(--muted);text-align:center;font-style:italic}
caption{caption-side:bottom;color:var(--muted);font-size:13px;text-align:left;padding-top:6px}
table.kv{width:auto;min-width:50%}
table.kv th{font-weight:500;color:var(--muted);padding-right:32px}
table.kv tbody tr:nth-child(even){background:none}
figure{margin:16px 0 24px;overflow-x:auto}
figure svg{display:block;width:100%;min-width:540px;height:auto;
border:1px solid var(--line);border-radius:6px}
figcaption{color:var(--muted);font-size:13px;margin-top:6px}
.callout{display:flex;gap:12px;border:1px solid;border-left-width:5px;border-radius:6px;
padding:12px 16px;margin:16px 0}
.callout .icon{flex:none;width:22px;height:22px;border-radius:50%;color:#fff;font-weight:700;
text-align:center;line-height:22px;font-size:13px}
.callout .title{font-weight:650;margin:0 0 2px}.callout p{margin:0}
.callout.info{background:#eef6fc;border-color:#0072b2}.info .icon{background:#0072b2}
.callout.good{background:#ebf7f2;border-color:#009e73}.good .icon{background:#009e73}
.callout.warn{background:#fdf1e8;border-color:#d55e00}.warn .icon{background:#d55e00}
dl{margin:12px 0}dt{font-weight:600}dd{margin:0 0 10px 20px;color:#333}
pre{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:12px 14px;
overflow-x:auto;font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
footer{margin-top:48px;padding-top:12px;border-top:1px solid var(--line);color:var(--muted);
font-size:13px}
@media print{
body{font-size:10.5pt}.page{max-width:none;padding:0}a{color:inherit;text-decoration:none}
h2{break-after:avoid}figure,table,.callout,pre,dl{break-inside:avoid}
figure svg{border:0;min-width:0}
*{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
"""
