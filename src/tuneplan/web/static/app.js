/* tuneplan web planner. Vanilla JS, no build step: the form's state lives in the URL's query string,
   every change re-estimates (debounced) through the JSON API, and the plan view draws its Pareto chart
   with the vendored uPlot. Each figure also carries its raw value in data-value (for tests and tools). */
(() => {
  "use strict";

  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
  const form = $("#inputs");

  // Inputs kept in the URL; the page's own starting values (PAGE_DEFAULTS) are left out of it.
  const FIELDS = ["model", "config_name", "estimator", "method", "lora_rank", "lora_targets", "adapter_dtype", "trainable_layers",
    "precision", "quant", "optimizer", "galore_rank", "optimizer_impl", "master_weights", "grad_ckpt", "flash_attn", "moe_mode", "moe_experts", "framework", "ckpt_mode", "gpu", "peak_tflops",
    "memory_gib", "bandwidth_gbs", "gpus", "nodes", "sharding", "tp", "pp", "cp", "micro_batch",
    "grad_accum", "grad_accum_sync", "fsdp_adapter_wrap", "seq_len", "examples", "tokens_per_example", "epochs", "packing", "padding", "provider", "rate",
    "max_gpus", "objective", "deadline_h", "budget_usd", "stage", "precompute_ref", "group_size", "completion_len",
    "rollout_engine", "rollout_gpus"];
  const NUMBER_FIELDS = new Set(["lora_rank", "galore_rank", "trainable_layers", "peak_tflops", "memory_gib",
    "bandwidth_gbs", "gpus", "nodes", "tp", "pp", "cp", "micro_batch", "grad_accum", "seq_len", "examples",
    "tokens_per_example", "epochs", "rate", "max_gpus", "deadline_h", "budget_usd", "group_size", "completion_len",
    "rollout_gpus"]);
  const BOOL_FIELDS = new Set(["grad_ckpt", "flash_attn", "packing", "precompute_ref"]);
  const RL_STAGES = ["grpo", "ppo", "rloo"];
  const REF_STAGES = ["dpo", "kto"];
  const PLAN_ONLY = new Set(["max_gpus", "objective", "deadline_h", "budget_usd"]);
  const PAGE_DEFAULTS = {
    model: "Qwen/Qwen2.5-7B", gpu: "H100-SXM5-80GB", estimator: "tuneplan", method: "lora", lora_rank: 16, adapter_dtype: "fp32", trainable_layers: 2,
    precision: "bf16", quant: "", optimizer: "adamw", optimizer_impl: "", master_weights: "", grad_ckpt: false, flash_attn: true, moe_mode: "sparse", moe_experts: "", framework: "", ckpt_mode: "",
    gpus: 1, nodes: "", sharding: "ddp", tp: 1, pp: 1, cp: 1, micro_batch: 4, grad_accum: 1, grad_accum_sync: "", fsdp_adapter_wrap: "",
    examples: 10000, tokens_per_example: 512, epochs: 1, packing: false, padding: "", provider: "", max_gpus: 8,
    objective: "cheapest", stage: "sft", precompute_ref: false, rollout_engine: "hf", rollout_gpus: 0,
  };
  const PLAN_GPUS_DEFAULT = ["A10G-24GB", "L40S-48GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB"];
  const PLAN_METHODS_DEFAULT = ["lora", "qlora", "full"];
  const COLORS = ["#2458c6", "#e07b22", "#2f9e6a", "#b8417a", "#7a5cc4", "#8c8c2a", "#3a9fb0", "#c23b3b",
    "#777777", "#4d7f17", "#b06a00", "#1b5e8c"];
  const PART_LABELS_ALL = {
    weights: "weights", gradients: "gradients", gradient_buckets: "DDP gradient buckets", master_weights: "fp32 master", optimizer: "optimizer state",
    gathered_params: "gathered params", activations: "activations", logits: "logits", workspace: "workspace",
    cuda_context: "CUDA context", overhead_alloc: "allocator overhead", forward: "forward", backward: "backward",
    recompute: "recompute", dequant: "dequantise", overhead: "overhead", tensor_parallel: "tensor parallel",
    pipeline_bubble: "pipeline bubble", optimizer_step: "optimizer", communication: "communication",
    other: "other (not broken down)", weights_and_optimizer_state: "weights + optimizer state",
    reference_forward: "reference forward", policy_nograd: "policy no-grad forward", rollout_prefill: "rollout prefill",
    rollout_decode: "rollout decode", rollout_weight_sync: "weight sync", reward: "reward model", value_model: "value model",
    reference_model: "reference model", reward_model: "reward model", rollout_kv_cache: "rollout KV cache",
    rollout_engine: "vLLM share", loss_buffers: "loss buffers", learned_correction: "learned correction",
  };

  const S = {
    options: null, models: [], modelsByName: new Map(), gpus: [], gpusByName: new Map(),
    view: "estimate", timer: null, ctrl: null, seq: 0, plan: null, planSort: { key: "cost_usd", dir: 1 },
    chart: null, lastEstimate: null, busy: true, timerFired: false,
  };

  // ---------------------------------------------------------------------------------------------
  // formatting

  const nf = (x, digits) => Number(x).toLocaleString("en-US", { maximumFractionDigits: digits,
    minimumFractionDigits: 0 });

  function sig(x, n = 3) {
    if (x === null || x === undefined || !Number.isFinite(x)) return "—";
    if (x === 0) return "0";
    const mag = Math.floor(Math.log10(Math.abs(x)));
    const digits = Math.max(0, n - 1 - mag);
    return nf(Number(x.toFixed(Math.min(digits, 12))), digits);
  }

  function fmtHours(s) {
    if (s === null || s === undefined || !Number.isFinite(s)) return "—";
    const h = s / 3600;
    if (h >= 72) return `${sig(h / 24)} days`;
    if (h >= 1) return `${sig(h)} h`;
    if (s >= 60) return `${sig(s / 60)} min`;
    return `${sig(s)} s`;
  }

  function fmtStep(s) {
    if (!Number.isFinite(s)) return "—";
    return s >= 1 ? `${sig(s)} s` : `${sig(s * 1000)} ms`;
  }

  const fmtUsd = (x) => (x === null || x === undefined || !Number.isFinite(x)) ? "—"
    : x >= 100 ? `$${nf(Math.round(x), 0)}` : `$${x.toFixed(2)}`;
  const fmtGib = (x) => Number.isFinite(x) ? `${x >= 100 ? nf(x, 0) : x.toFixed(1)} GiB` : "—";
  const esc = (t) => String(t).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;",
    '"': "&quot;", "'": "&#39;" }[c]));

  function setFig(id, text, value) {
    const el = $(id);
    el.textContent = text;
    el.dataset.value = value === null || value === undefined ? "" : String(value);
  }

  // ---------------------------------------------------------------------------------------------
  // form <-> state <-> URL

  function fieldEl(name) { return form.elements.namedItem(name); }

  function getField(name) {
    const el = fieldEl(name);
    if (!el) return undefined;
    if (BOOL_FIELDS.has(name)) return el.checked;
    const v = el.value.trim();
    if (v === "") return undefined;
    if (NUMBER_FIELDS.has(name)) return Number(v);
    return v;
  }

  function setField(name, value) {
    const el = fieldEl(name);
    if (!el) return;
    if (BOOL_FIELDS.has(name)) el.checked = value === true || value === "true" || value === "1";
    else el.value = value === undefined || value === null ? "" : String(value);
  }

  function checkedValues(box) { return $$("input[type=checkbox]", box).filter((c) => c.checked).map((c) => c.value); }

  function usingConfig() {
    return $("#config-box").open && $("#config_json").value.trim() !== "";
  }

  function collect() {
    const st = {};
    for (const f of FIELDS) {
      const v = getField(f);
      if (v !== undefined) st[f] = v;
    }
    st.plan_gpus = checkedValues($("#plan-gpus"));
    st.plan_methods = checkedValues($("#plan-methods"));
    return st;
  }

  function writeUrl(st) {
    const q = new URLSearchParams();
    if (S.view !== "estimate") q.set("view", S.view);
    for (const f of FIELDS) {
      if (!(f in st)) continue;
      if (PAGE_DEFAULTS[f] !== undefined && String(PAGE_DEFAULTS[f]) === String(st[f])) continue;
      if (f === "model" && usingConfig()) continue;
      q.set(f, String(st[f]));
    }
    if (usingConfig()) q.set("config_json", compactJson($("#config_json").value));
    const same = (a, b) => [...a].sort().join(",") === [...b].sort().join(",");
    if (!same(st.plan_gpus, PLAN_GPUS_DEFAULT.filter((g) => S.gpusByName.has(g)))) q.set("plan_gpus", st.plan_gpus.join(","));
    if (!same(st.plan_methods, PLAN_METHODS_DEFAULT)) q.set("plan_methods", st.plan_methods.join(","));
    const s = q.toString();
    history.replaceState(null, "", s ? `?${s}` : location.pathname);
  }

  function compactJson(text) {
    try { return JSON.stringify(JSON.parse(text)); } catch { return text; }
  }

  function readUrl() {
    const q = new URLSearchParams(location.search);
    for (const [k, v] of Object.entries(PAGE_DEFAULTS)) setField(k, v);
    for (const f of FIELDS) if (q.has(f)) setField(f, q.get(f));
    if (q.has("config_json")) {
      let text = q.get("config_json");
      try { text = JSON.stringify(JSON.parse(text), null, 2); } catch { /* keep as typed */ }
      $("#config_json").value = text;
      $("#config-box").open = true;
    }
    const pg = q.has("plan_gpus") ? q.get("plan_gpus").split(",") : PLAN_GPUS_DEFAULT;
    const pm = q.has("plan_methods") ? q.get("plan_methods").split(",") : PLAN_METHODS_DEFAULT;
    for (const c of $$("#plan-gpus input")) c.checked = pg.includes(c.value);
    for (const c of $$("#plan-methods input")) c.checked = pm.includes(c.value);
    const m = getField("model");
    $("#model-search").value = m || "";
    setView(q.get("view") === "plan" ? "plan" : "estimate", false);
  }

  // ---------------------------------------------------------------------------------------------
  // requests

  function modelPart(st) {
    if (usingConfig()) {
      let cfg;
      try { cfg = JSON.parse($("#config_json").value); } catch (e) {
        throw clientError("config_json", `not valid JSON: ${e.message}`);
      }
      if (!cfg || typeof cfg !== "object" || Array.isArray(cfg)) throw clientError("config_json", "must be a JSON object");
      const out = { config_json: cfg };
      if (st.config_name) out.config_name = st.config_name;
      return out;
    }
    if (!st.model) throw clientError("model", "pick a model from the catalog (or paste a config.json)");
    return { model: st.model };
  }

  function clientError(field, msg) { return { client: true, detail: [{ loc: ["body", field], msg }] }; }

  function estimateBody(st) {
    const body = modelPart(st);
    for (const f of FIELDS) {
      if (f === "model" || f === "config_name" || PLAN_ONLY.has(f) || !(f in st)) continue;
      body[f] = st[f];
    }
    if (body.gpu === "") delete body.gpu;
    if (st.gpu) { delete body.peak_tflops; delete body.memory_gib; delete body.bandwidth_gbs; }
    if (st.rate !== undefined) delete body.provider;
    const lora = S.options.lora_family.includes(st.method);
    if (!lora) { delete body.lora_rank; delete body.lora_targets; delete body.adapter_dtype; }
    if (st.method !== "freeze") delete body.trainable_layers;
    if (st.method !== "full" && st.method !== "freeze") delete body.master_weights;
    if (!isMoe()) { delete body.moe_mode; delete body.moe_experts; }
    if (body.moe_experts === "") delete body.moe_experts;
    if (body.optimizer_impl === "") delete body.optimizer_impl;
    if (st.optimizer !== "galore-adamw") delete body.galore_rank;
    if (body.grad_accum_sync === "") delete body.grad_accum_sync;
    if (body.fsdp_adapter_wrap === "" || st.method === "full" || st.method === "freeze") delete body.fsdp_adapter_wrap;
    if (body.packing || body.padding === "") delete body.padding;
    if (!RL_STAGES.includes(st.stage)) {
      for (const f of ["group_size", "completion_len", "rollout_engine", "rollout_gpus"]) delete body[f];
    }
    if (!REF_STAGES.includes(st.stage)) delete body.precompute_ref;
    return body;
  }

  function planBody(st) {
    const body = modelPart(st);
    for (const f of ["examples", "tokens_per_example", "epochs", "seq_len", "packing", "max_gpus", "objective",
      "deadline_h", "budget_usd", "provider", "rate"]) {
      if (f in st) body[f] = st[f];
    }
    if (!body.packing) delete body.packing;
    if (st.rate !== undefined) delete body.provider;
    body.gpus = st.plan_gpus;
    body.methods = st.plan_methods;
    if (!body.gpus.length) throw clientError("gpus", "tick at least one GPU type");
    if (!body.methods.length) throw clientError("methods", "tick at least one method");
    return body;
  }

  function schedule(delay) {
    S.busy = true;
    clearTimeout(S.timer);
    S.timerFired = false;
    S.timer = setTimeout(() => { S.timerFired = true; update(); }, delay ?? (S.view === "plan" ? 350 : 120));
  }

  async function update() {
    const st = collect();
    writeUrl(st);
    syncVisibility(st);
    const view = S.view;
    let body;
    try {
      body = view === "plan" ? planBody(st) : estimateBody(st);
    } catch (e) {
      if (e && e.client) { S.seq++; if (S.ctrl) S.ctrl.abort(); showErrors(e.detail); settle(); return; }
      settle();
      throw e;
    }
    if (S.ctrl) S.ctrl.abort();
    const ctrl = new AbortController();
    S.ctrl = ctrl;
    const seq = ++S.seq;
    $("#out").classList.add("busy");
    const t0 = performance.now();
    let res, data;
    try {
      res = await fetch(view === "plan" ? "/api/plan" : "/api/estimate", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
        signal: ctrl.signal,
      });
      data = await res.json();
    } catch (e) {
      if (e.name === "AbortError") return;
      if (seq === S.seq) {
        $("#out").classList.remove("busy");
        showErrors([{ loc: [], msg: `no answer from the server (${e.message})` }]);
        settle();
      }
      return;
    }
    if (seq !== S.seq) return;
    $("#out").classList.remove("busy");
    const ms = performance.now() - t0;
    if (!res.ok) {
      showErrors(Array.isArray(data.detail) ? data.detail : [{ loc: [], msg: String(data.detail || res.statusText) }]);
      settle();
      return;
    }
    clearErrors();
    if (view === "plan") renderPlan(data); else renderEstimate(data);
    $("#command").textContent = data.command || "";
    $("#command-note").textContent = data.command_note || "";
    $("#status").textContent = `${view} answered in ${Math.round(ms)} ms`;
    document.body.dataset.ready = view;
    document.body.dataset.seq = String(seq);
    settle();
  }

  /* Idle when no change is waiting for its debounce and the latest request has been drawn: tests wait on
     `window.tuneplanIdle()`. */
  function settle() { if (!S.timer || S.timerFired) S.busy = false; }
  window.tuneplanIdle = () => !S.busy;

  // ---------------------------------------------------------------------------------------------
  // errors

  function clearErrors() {
    $("#error").hidden = true;
    $("#error").innerHTML = "";
    $("#out").classList.remove("stale");
    $("#out").dataset.stale = "false";
    for (const el of $$(".invalid")) el.classList.remove("invalid");
  }

  function showErrors(detail) {
    clearErrors();
    const items = detail.map((d) => {
      const loc = (d.loc || []).filter((x) => x !== "body");
      const field = loc.length ? String(loc[0]) : "";
      const id = { model: "model-search", gpus: S.view === "plan" ? "plan-gpus" : "gpus",
        methods: "plan-methods" }[field] || field;
      const el = id ? document.getElementById(id) : null;
      if (el) el.classList.add("invalid");
      let msg = errorText(field, d);
      const paste = field === "model" && /unknown model|not in the catalog|no config/i.test(d.msg || "")
        ? ` <button type="button" class="link" data-action="paste-config">Paste its config.json</button>` : "";
      return `<li>${field ? `<b>${esc(field.replace(/_/g, " "))}</b>: ` : ""}${esc(msg)}${paste}</li>`;
    });
    $("#error").innerHTML = `Cannot ${S.view === "plan" ? "plan" : "estimate"} this yet:<ul>${items.join("")}</ul>`;
    $("#error").hidden = false;
    const pb = $("#error [data-action=paste-config]");
    if (pb) pb.addEventListener("click", () => { $("#config-box").open = true; $("#config_json").focus(); });
    // the figures below are the last good answer's, not this input's: dimmed, and said so
    $("#out").classList.add("stale");
    $("#out").dataset.stale = "true";
    document.body.dataset.ready = "error";
    $("#summary").dataset.fits = "false";
    $("#summary").textContent = "Check the inputs: " + detail.map((d) => d.msg).join("; ");
  }

  /* An error's words for the page: the closest names once (not the server's list again), and no advice
     for command-line flags the page has no box for (the page's own way in is the paste box). */
  function errorText(field, d) {
    let msg = String(d.msg || "invalid");
    if (field === "model") {
      msg = msg.replace(/;?\s*pass (--)?model [^;]*/g, "").replace(/;?\s*or --from [^;]*/g, "");
    }
    const closest = (d.closest || []).filter((c) => !msg.includes(c));
    if (closest.length) msg += /closest/.test(msg) ? `, ${closest.join(", ")}` : ` (closest: ${closest.join(", ")})`;
    return msg;
  }

  // ---------------------------------------------------------------------------------------------
  // estimate view

  function renderEstimate(d) {
    S.lastEstimate = d;
    const fits = !!d.fits;
    const v = $("#verdict");
    v.dataset.fits = String(fits);
    v.dataset.value = String(d.memory_per_gpu_gib);
    const cap = d.memory_capacity_gib;
    const mb = d.max_micro_batch;
    const iv = d.interval;
    let mbText = mb === null || mb === undefined ? ""
      : mb >= 1 ? `Largest micro-batch that fits: ${mb}.` : "Even micro-batch 1 does not fit.";
    if (fits && iv && iv.memory_per_gpu_gib_high > cap) {
      mbText += ` Tight: the ${Math.round((iv.coverage || 0.8) * 100)}% interval reaches ${fmtGib(iv.memory_per_gpu_gib_high)}.`;
    }
    if (iv && Number.isFinite(iv.fit_probability)) mbText += ` Fit probability ${Math.round(iv.fit_probability * 100)}%.`;
    if (d.weights_scheme) mbText += ` Full fine-tuning: ${d.weights_scheme}.`;
    // a peak above the GPU that still fits holds blocks cached for other batch shapes (torch frees them
    // before it runs out): the verdict names the figure it is judged on, then the peak
    const cached = fits && Number.isFinite(d.memory_fit_gib) && d.memory_per_gpu_gib > cap;
    const fitGib = cached ? d.memory_fit_gib : d.memory_per_gpu_gib;
    if (cached) mbText = `${fmtGib(d.memory_per_gpu_gib)} with blocks cached for other batch shapes, which torch frees before it runs out. ` + mbText;
    v.innerHTML = fits
      ? `Fits: ${esc(fmtGib(fitGib))} of ${esc(fmtGib(cap))} per GPU<span class="s">${esc(mbText)}</span>`
      : `Does not fit: needs ${esc(fmtGib(d.memory_per_gpu_gib))} per GPU, ${esc(fmtGib(cap))} available<span class="s">${esc(mbText)}</span>`;

    const sized = d.wall_clock_s !== null && d.wall_clock_s !== undefined;
    setFig("#r-wall", sized ? fmtHours(d.wall_clock_s) : "needs a data size", d.wall_clock_s);
    $("#r-wall-interval").textContent = !sized ? "enter examples and tokens per example" : iv && Number.isFinite(iv.wall_clock_s_low)
      ? `${Math.round((iv.coverage || 0.8) * 100)}% interval ${fmtHours(iv.wall_clock_s_low)} – ${fmtHours(iv.wall_clock_s_high)}`
      : "no interval (no measured residuals for this estimator)";
    $("#r-wall-interval").title = iv && iv.why && iv.why.length ? `widest for: ${iv.why.join("; ")}` : "";
    setFig("#r-device-hours", sized ? `${sig(d.device_hours)} GPU-h` : "—", d.device_hours);
    $("#r-steps").textContent = sized ? `${nf(d.steps, 0)} steps × ${fmtStep(d.step_time_s)}` : `${fmtStep(d.step_time_s)} per step`;
    setFig("#r-cost", fmtUsd(d.cost_usd), d.cost_usd);
    $("#r-cost-s").textContent = !sized ? "needs a data size (examples × tokens)"
      : d.cost_usd === null || d.cost_usd === undefined
      ? "no price for this GPU: enter $ per GPU-hour"
      : (iv && Number.isFinite(iv.cost_usd_low) ? `${fmtUsd(iv.cost_usd_low)} – ${fmtUsd(iv.cost_usd_high)} · ` : "")
        + `at $${Number(d.rate_usd_per_gpu_hour).toFixed(2)}/GPU-h`;
    $("#r-cost-s").title = d.rate_source || "";
    setFig("#r-tps", `${nf(Math.round(d.tokens_per_s), 0)} tok/s`, d.tokens_per_s);
    $("#r-tps-s").textContent = `${sig(d.samples_per_s)} samples/s · MFU ${Math.round((d.mfu || 0) * 100)}%`;
    setFig("#r-energy", sized ? `${sig(d.energy_kwh)} kWh` : "—", d.energy_kwh);
    $("#r-co2").textContent = sized ? `${sig(d.co2_kg)} kg CO₂` : "needs a data size";
    setFig("#r-mem", fmtGib(d.memory_per_gpu_gib), d.memory_per_gpu_gib);
    const m = $("#r-maxmb");
    m.dataset.value = mb === null || mb === undefined ? "" : String(mb);
    m.textContent = (iv && Number.isFinite(iv.memory_per_gpu_gib_low)
      ? `${fmtGib(iv.memory_per_gpu_gib_low)} – ${fmtGib(iv.memory_per_gpu_gib_high)} · ` : "")
      + (mb === null || mb === undefined ? `of ${fmtGib(cap)}` : `max micro-batch ${mb}`);

    // memory bar against capacity
    const mem = { ...(d.memory_breakdown_gib || {}) };
    const partsSum = Object.values(mem).reduce((a, b) => a + (b || 0), 0);
    if (d.memory_per_gpu_gib - partsSum > 0.01) mem.overhead_alloc = d.memory_per_gpu_gib - partsSum;
    for (const k of Object.keys(mem)) if (!(mem[k] > 0)) delete mem[k];
    drawBar("#mem-bar", "#mem-legend", mem, Math.max(d.memory_per_gpu_gib, partsSum, cap), fmtGib, cap);
    $("#mem-bar").classList.toggle("over", !fits);
    $("#mem-caption").textContent = `${fmtGib(d.memory_per_gpu_gib)} of ${fmtGib(cap)} (black line: the GPU's memory)`
      + (partsSum > d.memory_per_gpu_gib * 1.01
        ? `; the parts (${fmtGib(partsSum)}) are the physics model's, the total is after the calibrated correction` : "");
    $("#mem-legend").dataset.total = String(d.memory_per_gpu_gib);
    $("#mem-legend").dataset.sum = String(Object.values(mem).reduce((a, b) => a + b, 0));

    // step time
    const step = {};
    for (const [k, val] of Object.entries(d.step_breakdown_s || {})) {
      if (k === "total") continue;
      step[k === "optimizer" ? "optimizer_step" : k] = val;
    }
    const stepSum = Object.values(step).reduce((a, b) => a + (b || 0), 0);
    if (d.step_time_s - stepSum > 1e-9 * d.step_time_s + 1e-12) step.other = d.step_time_s - stepSum;
    drawBar("#step-bar", "#step-legend", step, Math.max(d.step_time_s, stepSum), fmtStep, null, d.step_part_labels || {});
    $("#step-caption").textContent = `${fmtStep(d.step_time_s)} per optimizer step, ${d.gpus} GPU${d.gpus > 1 ? "s" : ""}`
      + (stepSum > d.step_time_s * 1.01
        ? `; the parts (${fmtStep(stepSum)}) are the physics model's, the total is after the calibrated correction` : "");

    // warnings, suggestions, assumptions
    const w = [];
    if ((d.warnings || []).length) w.push(`<div class="warn"><b>Warnings</b><ul>${d.warnings.map((x) => `<li>${esc(x)}</li>`).join("")}</ul></div>`);
    if ((d.suggestions || []).length) w.push(`<div class="warn"><b>To make it fit</b><ul>${d.suggestions.map((x) => `<li>${esc(x)}</li>`).join("")}</ul></div>`);
    $("#warnings").innerHTML = w.join("");
    $("#assumptions").innerHTML = (d.assumptions || []).map((x) => `<li>${esc(x)}</li>`).join("");
    if (d.model_info) showModelInfo(d.model_info);
    const sum = $("#summary");
    sum.dataset.fits = String(fits);
    sum.textContent = (sized ? `${fmtHours(d.wall_clock_s)} · ${fmtUsd(d.cost_usd)} · ` : "")
      + `${fits ? "fits" : "does not fit"} `
      + `(${fmtGib(d.memory_per_gpu_gib)} of ${fmtGib(cap)})`;
  }

  function drawBar(barSel, legendSel, parts, scale, fmt, cap, labels = {}) {
    const bar = $(barSel);
    const PART_LABELS = { ...PART_LABELS_ALL, ...labels };
    const entries = Object.entries(parts).filter(([, v]) => v > 0);
    bar.innerHTML = entries.map(([k, v], i) => `<span style="width:${(100 * v / scale).toFixed(3)}%;background:${COLORS[i % COLORS.length]}" title="${esc(PART_LABELS[k] || k)}: ${esc(fmt(v))}"></span>`).join("")
      + (cap ? `<span class="cap" style="left:calc(${(100 * cap / scale).toFixed(3)}% - 2px)" title="GPU memory ${esc(fmt(cap))}"></span>` : "");
    bar.setAttribute("aria-label", entries.map(([k, v]) => `${PART_LABELS[k] || k} ${fmt(v)}`).join(", "));
    $(legendSel).innerHTML = entries.map(([k, v], i) => `<li><i style="background:${COLORS[i % COLORS.length]}"></i>${esc(PART_LABELS[k] || k)} <b>${esc(fmt(v))}</b></li>`).join("");
  }

  // ---------------------------------------------------------------------------------------------
  // plan view

  const num = (x) => (typeof x === "number" && Number.isFinite(x) ? x : null);

  function candidateFields(c) {
    return {
      gpu: c.gpu ?? "", gpus: c.gpus ?? null, method: c.method ?? "", micro_batch: c.micro_batch ?? null,
      grad_accum: c.grad_accum ?? null, sharding: c.sharding ?? "", grad_ckpt: c.grad_ckpt ?? null,
      wall_clock_s: num(c.time_s ?? c.wall_clock_s), cost_usd: num(c.cost_usd), device_hours: num(c.device_hours),
      energy_kwh: num(c.energy_kwh), memory_per_gpu_gib: num(c.memory_per_gpu_gib), tokens_per_s: num(c.tokens_per_s),
      pareto: !!c.pareto, eligible: c.eligible !== false, raw: c,
    };
  }

  const sameCand = (a, b) => !!a && !!b && a.gpu === b.gpu && a.gpus === b.gpus && a.method === b.method
    && a.micro_batch === b.micro_batch && a.grad_accum === b.grad_accum && a.sharding === b.sharding
    && a.grad_ckpt === b.grad_ckpt;

  function renderPlan(d) {
    const cands = (d.points || d.candidates || []).map(candidateFields);
    const rec = d.recommended ? candidateFields(d.recommended) : null;
    const runner = d.runner_up ? candidateFields(d.runner_up) : null;
    for (const c of cands) c.recommended = sameCand(rec, c);
    S.plan = { d, cands, rec, runner };
    const describe = (c) => `<b>${c.gpus} × ${esc(c.gpu)}</b>, ${esc(c.method)}`
      + ` (micro-batch ${c.micro_batch} × accum. ${c.grad_accum}, ${esc(c.sharding === "none" ? "no sharding" : c.sharding)}${c.grad_ckpt ? ", checkpointing" : ""}):`
      + ` <b>${esc(fmtHours(c.wall_clock_s))}</b>, <b>${esc(fmtUsd(c.cost_usd))}</b>`;
    const box = $("#plan-rec");
    if (rec) {
      box.innerHTML = `<div>Recommended (${esc(d.objective)}): ${describe(rec)}</div>`
        + (runner ? `<div>Runner-up: ${describe(runner)}</div>` : "")
        + (d.why ? `<p class="hint">${esc(d.why)}</p>` : "");
      box.dataset.value = JSON.stringify({ gpu: rec.gpu, gpus: rec.gpus, method: rec.method,
        time_s: rec.wall_clock_s, cost_usd: rec.cost_usd });
      $("#summary").dataset.fits = "true";
      $("#summary").textContent = `Plan: ${rec.gpus} × ${rec.gpu}, ${rec.method} · ${fmtHours(rec.wall_clock_s)} · ${fmtUsd(rec.cost_usd)}`;
    } else {
      box.innerHTML = `<div><b>No plan:</b> ${esc(d.message || "no configuration meets the constraints")}</div>`;
      box.dataset.value = "";
      $("#summary").dataset.fits = "false";
      $("#summary").textContent = "Plan: no configuration meets the constraints";
    }
    const lines = [`Searched ${nf(d.n_evaluated || 0, 0)} configurations in ${sig((d.seconds || 0) * 1000)} ms:`
      + ` ${nf(d.n_fit || 0, 0)} fit in memory, ${nf(d.n_eligible || 0, 0)} meet the constraints.`
      + ` Chart and table: the best of each GPU type × count × method, and the Pareto front.`];
    for (const x of d.infeasible || []) lines.push(`${x.choice}: ${x.reason}`);
    for (const x of d.notes || []) lines.push(x);  // assumptions: GPU variants read, fill-ins, old prices
    $("#plan-infeasible").innerHTML = lines.map(esc).join("<br>");
    drawChart();
    drawTable();
  }

  function drawChart() {
    const el = $("#plan-chart");
    if (S.chart) { S.chart.destroy(); S.chart = null; }
    el.innerHTML = "";
    el.dataset.points = "0";
    const P = S.plan;
    if (!P) return;
    const front = (P.d.pareto || []).map(candidateFields).filter((c) => c.wall_clock_s > 0 && c.cost_usd > 0);
    const pts = P.cands.filter((c) => c.wall_clock_s > 0 && c.cost_usd > 0);
    for (const f of front) if (!pts.some((c) => sameCand(c, f))) pts.push(f);
    pts.sort((a, b) => a.wall_clock_s - b.wall_clock_s || a.cost_usd - b.cost_usd);
    if (!pts.length) {
      el.innerHTML = `<p class="hint">Nothing to draw: no candidate with both a time and a price (enter a $ per GPU-hour?).</p>`;
      return;
    }
    const types = [...new Set(pts.map((c) => c.gpu))];
    const xs = pts.map((c) => c.wall_clock_s / 3600);
    const data = [xs];
    const series = [{ label: "wall clock" }];
    types.forEach((t, i) => {
      data.push(pts.map((c) => (c.gpu === t ? c.cost_usd : null)));
      series.push({ label: t, stroke: COLORS[i % COLORS.length], paths: () => null,
        points: { show: true, size: 7, width: 1, fill: COLORS[i % COLORS.length] + "aa", stroke: COLORS[i % COLORS.length] } });
    });
    data.push(pts.map((c) => (front.some((f) => sameCand(f, c)) ? c.cost_usd : null)));
    series.push({ label: "Pareto front", stroke: "#1d232b", width: 1.5, spanGaps: true, points: { show: false } });
    data.push(pts.map((c) => (sameCand(P.rec, c) ? c.cost_usd : null)));
    series.push({ label: "recommended", stroke: "#c23b3b", paths: () => null,
      points: { show: true, size: 16, width: 3, fill: "transparent", stroke: "#c23b3b" } });
    const width = Math.max(280, el.clientWidth || 600);
    const opts = {
      width, height: Math.min(420, Math.max(260, Math.round(width * 0.55))),
      scales: { x: { time: false, distr: 3 }, y: { distr: 3 } },
      axes: [
        { label: "wall clock, hours", stroke: "#5b6571", grid: { stroke: "#eceff2" } },
        { label: "cost, $", stroke: "#5b6571", grid: { stroke: "#eceff2" }, size: 60,
          values: (u, vals) => vals.map((v) => (v === null ? "" : fmtUsd(v))) },
      ],
      series,
      legend: { show: true, live: false },
      cursor: { drag: { x: false, y: false }, points: { show: false } },
      hooks: { setCursor: [(u) => hover(u, pts)], draw: [(u) => drawLimits(u, limits)] },
    };
    const limits = planLimits(P.d);
    if (limits.deadline_h) opts.scales.x.range = (u, lo, hi) => logRange(Math.min(lo, limits.deadline_h), Math.max(hi, limits.deadline_h));
    if (limits.budget_usd) opts.scales.y.range = (u, lo, hi) => logRange(Math.min(lo, limits.budget_usd), Math.max(hi, limits.budget_usd));
    S.chart = new uPlot(opts, data, el);
    el.dataset.points = String(pts.length);
    el.dataset.deadlineH = limits.deadline_h ? String(limits.deadline_h) : "";
    el.dataset.budgetUsd = limits.budget_usd ? String(limits.budget_usd) : "";
  }

  /* The plan's constraints, as the CLI plot draws them: a vertical line at the deadline, a horizontal one at
     the budget (from the answer's constraints, else the form). */
  function planLimits(d) {
    const c = d.constraints || {};
    const dl = num(c.deadline_s) !== null ? c.deadline_s / 3600 : getField("deadline_h");
    const bu = num(c.budget_usd) !== null ? c.budget_usd : getField("budget_usd");
    return { deadline_h: dl > 0 ? Number(dl) : null, budget_usd: bu > 0 ? Number(bu) : null };
  }

  function logRange(lo, hi) {
    const a = Math.pow(10, Math.floor(Math.log10(lo * 0.9)));
    const b = Math.pow(10, Math.ceil(Math.log10(hi * 1.1)));
    return [a, b];
  }

  function drawLimits(u, limits) {
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    ctx.save();
    ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
    ctx.lineWidth = 1.5 * devicePixelRatio;
    ctx.font = `${12 * devicePixelRatio}px sans-serif`;
    ctx.strokeStyle = ctx.fillStyle = "#c23b3b";
    if (limits.deadline_h) {
      const x = u.valToPos(limits.deadline_h, "x", true);
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + height); ctx.stroke();
      ctx.fillText(`deadline ${fmtHours(limits.deadline_h * 3600)}`, x + 4 * devicePixelRatio, top + 14 * devicePixelRatio);
    }
    if (limits.budget_usd) {
      const y = u.valToPos(limits.budget_usd, "y", true);
      ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(left + width, y); ctx.stroke();
      ctx.textAlign = "right";
      ctx.fillText(`budget ${fmtUsd(limits.budget_usd)}`, left + width - 4 * devicePixelRatio, y - 4 * devicePixelRatio);
    }
    ctx.restore();
  }

  function hover(u, pts) {
    const { left, top } = u.cursor;
    if (left === undefined || left < 0) return;
    let best = null, bestD = 400;
    for (const c of pts) {
      const x = u.valToPos(c.wall_clock_s / 3600, "x");
      const y = u.valToPos(c.cost_usd, "y");
      const dd = (x - left) ** 2 + (y - top) ** 2;
      if (dd < bestD) { bestD = dd; best = c; }
    }
    $("#plan-hover").innerHTML = best
      ? `${esc(best.gpu)} × ${best.gpus}, ${esc(best.method)}${best.micro_batch ? `, micro-batch ${best.micro_batch}` : ""}: ${esc(fmtHours(best.wall_clock_s))}, ${esc(fmtUsd(best.cost_usd))}${best.pareto ? " (Pareto)" : ""}`
      : "Hover a point; the line is the Pareto front (nothing both cheaper and faster).";
    for (const tr of $$("#plan-table tbody tr")) tr.classList.toggle("hl", !!best && tr._cand === best);
  }

  const COLUMNS = [
    { key: "gpu", label: "GPU", txt: true }, { key: "gpus", label: "GPUs" }, { key: "method", label: "method", txt: true },
    { key: "wall_clock_s", label: "wall clock", fmt: fmtHours }, { key: "cost_usd", label: "cost", fmt: fmtUsd },
    { key: "micro_batch", label: "micro-batch" }, { key: "grad_accum", label: "accum." },
    { key: "sharding", label: "sharding", txt: true },
    { key: "grad_ckpt", label: "ckpt", txt: true, fmt: (x) => (x ? "on" : "off") },
    { key: "device_hours", label: "GPU-h", fmt: (x) => sig(x) },
    { key: "energy_kwh", label: "kWh", fmt: (x) => sig(x) },
    { key: "memory_per_gpu_gib", label: "memory/GPU", fmt: fmtGib },
    { key: "tokens_per_s", label: "tokens/s", fmt: (x) => (x === null ? "—" : nf(Math.round(x), 0)) },
  ];
  const MAX_ROWS = 300;

  function drawTable() {
    const P = S.plan;
    const cols = COLUMNS.filter((c) => P.cands.some((x) => x[c.key] !== null && x[c.key] !== ""));
    const { key, dir } = S.planSort;
    const head = $("#plan-table thead tr");
    head.innerHTML = cols.map((c) => `<th scope="col" data-key="${c.key}" class="col-${c.key} ${c.txt ? "txt" : ""}"`
      + `${c.key === key ? ` aria-sort="${dir > 0 ? "ascending" : "descending"}"` : ""} tabindex="0">${esc(c.label)}</th>`).join("");
    const rows = [...P.cands].sort((a, b) => {
      const x = a[key], y = b[key];
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (typeof x === "string" ? x.localeCompare(y) : x - y) * dir;
    }).slice(0, MAX_ROWS);
    const tb = $("#plan-table tbody");
    tb.innerHTML = "";
    for (const c of rows) {
      const tr = document.createElement("tr");
      if (c.pareto) tr.classList.add("pareto");
      if (c.recommended) tr.classList.add("recommended");
      if (!c.eligible) tr.classList.add("ineligible");
      tr.innerHTML = cols.map((col) => {
        const v = c[col.key];
        const text = col.fmt ? col.fmt(v) : v === null || v === undefined ? "—" : String(v);
        return `<td class="col-${col.key} ${col.txt ? "txt" : ""}" data-value="${esc(v ?? "")}">${esc(text)}</td>`;
      }).join("");
      tr._cand = c;
      tb.appendChild(tr);
    }
    $("#plan-table").dataset.rows = String(P.cands.length);
  }

  function sortBy(k) {
    if (S.planSort.key === k) S.planSort.dir = -S.planSort.dir;
    else S.planSort = { key: k, dir: 1 };
    drawTable();
  }

  // ---------------------------------------------------------------------------------------------
  // model search, GPU select, visibility

  function modelLabel(m) {
    const p = m.is_moe ? `${sig(m.params_total_b)}B (${sig(m.params_active_b)}B active)` : `${sig(m.params_total_b)}B`;
    return p;
  }

  function isMoe() {
    if (usingConfig()) return !!(S.configInfo && S.configInfo.is_moe);
    const m = S.modelsByName.get(getField("model"));
    return !!(m && m.is_moe);
  }

  function showModelInfo(info) {
    const parts = [`${sig(info.params_total_b)} B parameters`];
    if (info.is_moe) parts.push(`${sig(info.params_active_b)} B active (MoE)`);
    parts.push(info.model_type, `${info.n_layers} layers`);
    if (info.max_position_embeddings) parts.push(`context ${nf(info.max_position_embeddings, 0)}`);
    $("#model-info").textContent = `${info.name}: ${parts.join(" · ")}`;
  }

  function filterModels(text) {
    const words = text.toLowerCase().replace(/\//g, " ").split(/\s+/).filter(Boolean);
    return S.models.filter((m) => {
      const hay = `${m.name.toLowerCase()} ${sig(m.params_total_b)}b`;
      return words.every((w) => hay.includes(w));
    }).slice(0, 60);
  }

  function openList(items) {
    const ul = $("#model-list");
    ul.innerHTML = items.map((m, i) => `<li role="option" id="opt-${i}" data-name="${esc(m.name)}" aria-selected="${i === 0}">`
      + `<span>${esc(m.name)}</span><small>${esc(modelLabel(m))}</small></li>`).join("")
      || `<li class="none" aria-disabled="true"><span>no catalog model matches; Enter uses the name as typed</span></li>`;
    ul.hidden = false;
    $("#model-search").setAttribute("aria-expanded", "true");
  }

  function closeList() {
    $("#model-list").hidden = true;
    $("#model-search").setAttribute("aria-expanded", "false");
  }

  function chooseModel(name) {
    setField("model", name);
    $("#model-search").value = name;
    closeList();
    if ($("#config-box").open && $("#config_json").value.trim()) $("#config-box").open = false;
    const m = S.modelsByName.get(name);
    if (m) showModelInfo(m); else $("#model-info").textContent = "";
    schedule(0);
  }

  function setupModelSearch() {
    const input = $("#model-search");
    const ul = $("#model-list");
    input.addEventListener("input", () => openList(filterModels(input.value)));
    input.addEventListener("focus", () => { input.select(); openList(filterModels("")); });
    input.addEventListener("keydown", (e) => {
      const opts = $$("li[role=option]", ul);
      const cur = opts.findIndex((o) => o.getAttribute("aria-selected") === "true");
      if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        e.preventDefault();
        if (ul.hidden) openList(filterModels(input.value));
        const n = e.key === "ArrowDown" ? Math.min(opts.length - 1, cur + 1) : Math.max(0, cur - 1);
        opts.forEach((o, i) => o.setAttribute("aria-selected", String(i === n)));
        if (opts[n]) { opts[n].scrollIntoView({ block: "nearest" }); input.setAttribute("aria-activedescendant", opts[n].id); }
      } else if (e.key === "Enter") {
        e.preventDefault();
        if (!ul.hidden && cur >= 0 && opts[cur]) chooseModel(opts[cur].dataset.name);
        else if (input.value.trim()) chooseModel(input.value.trim());
      } else if (e.key === "Escape") {
        closeList();
        input.value = getField("model") || "";
      }
    });
    ul.addEventListener("mousedown", (e) => {
      const li = e.target.closest("li[role=option]");
      if (li) { e.preventDefault(); chooseModel(li.dataset.name); }
    });
    input.addEventListener("blur", () => setTimeout(() => {
      closeList();
      const typed = input.value.trim();
      const exact = S.models.find((m) => m.name.toLowerCase() === typed.toLowerCase());
      if (exact && exact.name !== getField("model")) chooseModel(exact.name);
      else input.value = getField("model") || "";
    }, 120));
  }

  function fillSelect(sel, values, labels) {
    const el = $(sel);
    el.innerHTML = values.map((v, i) => `<option value="${esc(v)}">${esc(labels ? labels[i] : v)}</option>`).join("");
  }

  function setupGpus() {
    const byVendor = new Map();
    for (const g of S.gpus) {
      const v = g.vendor || "other";
      if (!byVendor.has(v)) byVendor.set(v, []);
      byVendor.get(v).push(g);
    }
    let html = "";
    for (const [v, list] of byVendor) {
      html += `<optgroup label="${esc(v)}">` + list.map((g) => `<option value="${esc(g.name)}">${esc(g.name)} — `
        + `${sig(g.memory_gib)} GiB${g.usd_per_gpu_hour ? `, $${g.usd_per_gpu_hour.toFixed(2)}/h` : ""}</option>`).join("") + "</optgroup>";
    }
    html += `<option value="">Custom GPU (enter its figures)…</option>`;
    $("#gpu").innerHTML = html;
    $("#plan-gpus").innerHTML = S.gpus.map((g) => `<label title="${esc(g.usd_per_gpu_hour ? (g.price_source || `$${g.usd_per_gpu_hour.toFixed(2)}/GPU-h`) : "no catalog price")}">`
      + `<input type="checkbox" value="${esc(g.name)}"> ${esc(g.name)}</label>`).join("");
    $("#plan-methods").innerHTML = S.options.methods.map((m) => `<label><input type="checkbox" value="${esc(m)}"> ${esc(m)}</label>`).join("");
  }

  function syncVisibility(st) {
    const b = document.body.classList;
    b.toggle("no-lora", !S.options.lora_family.includes(st.method));
    b.toggle("no-freeze", st.method !== "freeze");
    b.toggle("no-full", st.method !== "full" && st.method !== "freeze");
    b.toggle("no-moe", !isMoe());
    b.toggle("no-galore", st.optimizer !== "galore-adamw");
    b.toggle("no-custom", !!st.gpu);
    b.toggle("no-rl", !RL_STAGES.includes(st.stage));
    b.toggle("no-refstage", !REF_STAGES.includes(st.stage));
    const g = S.gpusByName.get(st.gpu);
    $("#gpu-info").textContent = g
      ? `${sig(g.peak_tflops.bf16 || g.peak_tflops.fp16 || 0)} TFLOP/s bf16 · ${nf(g.memory_bandwidth_gbs, 0)} GB/s · ${sig(g.memory_gib)} GiB`
        + (g.tdp_w ? ` · ${nf(g.tdp_w, 0)} W` : "") + (g.price_source ? ` · ${g.price_source}` : " · no catalog price")
      : "Your own accelerator: dense peak TFLOP/s at the training precision, memory and bandwidth.";
  }

  function setView(view, run = true) {
    S.view = view;
    document.body.classList.toggle("view-plan", view === "plan");
    for (const t of $$(".tabs button")) t.setAttribute("aria-selected", String(t.dataset.view === view));
    $("#view-estimate").hidden = view !== "estimate";
    $("#view-plan").hidden = view !== "plan";
    $("#command").textContent = "";
    if (run) schedule(0);
  }

  async function copyText(text, btn) {
    let ok = false;
    try { await navigator.clipboard.writeText(text); ok = true; } catch {
      const ta = document.createElement("textarea");
      ta.value = text; document.body.appendChild(ta); ta.select();
      try { ok = document.execCommand("copy"); } catch { ok = false; }
      ta.remove();
    }
    const old = btn.dataset.label || btn.textContent;
    btn.dataset.label = old;
    btn.textContent = ok ? "Copied" : "Copy failed";
    setTimeout(() => { btn.textContent = old; }, 1400);
  }

  async function checkConfig() {
    const box = $("#config-status");
    const text = $("#config_json").value.trim();
    S.configInfo = null;
    if (!text) { box.textContent = ""; return; }
    let cfg;
    try { cfg = JSON.parse(text); } catch (e) { box.textContent = `not valid JSON: ${e.message}`; return; }
    const res = await fetch("/api/model-config", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ config_json: cfg, config_name: getField("config_name") || null }) });
    const data = await res.json();
    if (res.ok) {
      S.configInfo = data;
      $("#model-search").value = data.name || getField("config_name") || "pasted config.json";
      $("#model-search").dataset.pasted = "true";
      box.textContent = `read: ${sig(data.params_total_b)} B parameters, ${data.model_type}, ${data.n_layers} layers`;
      showModelInfo(data);
    } else {
      box.textContent = (data.detail || []).map((d) => d.msg).join("; ");
    }
  }

  // ---------------------------------------------------------------------------------------------
  // your training config -> the form (POST /api/from-config)

  function listHtml(title, items) {
    if (!items || !items.length) return "";
    return `<p><b>${esc(title)}</b></p><ul>${items.map((x) => `<li>${esc(x)}</li>`).join("")}</ul>`;
  }

  async function readFromConfig(files) {
    const box = $("#from-report");
    if (!files.length) { box.textContent = "nothing to read"; return; }
    box.textContent = "reading…";
    const res = await fetch("/api/from-config", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ files }) });
    const data = await res.json();
    if (!res.ok) { box.textContent = (data.detail || []).map((d) => d.msg).join("; "); return; }
    for (const [k, v] of Object.entries(data.fields)) {
      if (k === "model") continue;
      setField(k, v);
    }
    if (data.fields.model) {
      setField("model", data.fields.model);
      $("#model-search").value = data.fields.model;
      if ($("#config-box").open) $("#config-box").open = false;
      const m = S.modelsByName.get(data.fields.model);
      if (m) showModelInfo(m); else $("#model-info").textContent = "";
    }
    box.innerHTML = `<p>Read ${esc(data.files.map((f, i) => `${f} (${data.formats[i]})`).join(", "))}; `
      + "the fields below can still be changed.</p>"
      + listHtml("Used", data.used) + listHtml("Assumed (the file does not say)", data.assumed)
      + listHtml("Ignored", data.ignored);
    syncVisibility(collect());
    schedule(0);
  }

  // Your dataset: uploaded to /api/data; its examples, tokens per example and longest batch fill the form.
  async function readData() {
    const file = $("#data-file").files[0];
    const box = $("#data-report");
    if (!file) { box.textContent = ""; return; }
    box.textContent = "reading…";
    const body = new FormData();
    body.append("file", file);
    const tok = $("#data-tokenizer").files[0];
    if (tok) body.append("tokenizer", tok);
    const v = collect();
    for (const k of ["micro_batch", "padding", "framework"]) if (v[k] !== undefined && v[k] !== "") body.append(k, v[k]);
    if (v.packing) { body.append("packing", "true"); if (v.seq_len) body.append("seq_len", v.seq_len); }
    const res = await fetch("/api/data", { method: "POST", body });
    const d = await res.json();
    if (!res.ok) { box.textContent = (d.detail || []).map((x) => x.msg).join("; "); return; }
    for (const [k, val] of Object.entries(d.fields)) setField(k, val);
    const c = d.collator;
    box.textContent = `${d.path}: ${d.examples.toLocaleString()} examples (${d.shape}), ${d.tokens.toLocaleString()} tokens, `
      + `mean ${Math.round(d.mean_length)}, p99 ${Math.round(d.p99_length)}, longest ${d.max_length}; ${c.mode}: padding waste `
      + `${(100 * c.padding_waste).toFixed(1)}%. Tokens ${d.tokens_source}. The sequence length is the longest batch's, `
      + "so the memory is the worst batch's (`tuneplan estimate --data` weighs the time over the batch lengths).";
    syncVisibility(collect());
    schedule(0);
  }

  async function filesOf(list) {
    return Promise.all(Array.from(list).map(async (f) => ({ name: f.name, text: await f.text() })));
  }

  function setupFromConfig() {
    const drop = $("#from-drop");
    drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
    drop.addEventListener("dragleave", () => drop.classList.remove("over"));
    drop.addEventListener("drop", async (e) => {
      e.preventDefault();
      drop.classList.remove("over");
      readFromConfig(await filesOf(e.dataTransfer.files));
    });
    $("#from-files").addEventListener("change", async (e) => readFromConfig(await filesOf(e.target.files)));
    $("#data-file").addEventListener("change", readData);
    $("#data-tokenizer").addEventListener("change", readData);
    $("#from-read").addEventListener("click", () => {
      const text = $("#from_text").value;
      if (text.trim()) readFromConfig([{ name: text.trim().startsWith("{") ? "pasted.json" : "pasted.yaml", text }]);
    });
  }

  // ---------------------------------------------------------------------------------------------
  // start

  async function start() {
    const [options, models, gpus] = await Promise.all(["/api/options", "/api/models", "/api/gpus"]
      .map((u) => fetch(u).then((r) => r.json())));
    S.options = options;
    S.models = models;
    S.modelsByName = new Map(models.map((m) => [m.name, m]));
    S.gpus = gpus;
    S.gpusByName = new Map(gpus.map((g) => [g.name, g]));
    fillSelect("#method", options.methods);
    fillSelect("#stage", options.stages);
    fillSelect("#rollout_engine", options.rollout_engines, options.rollout_engines.map((m) => (m === "hf" ? "HF generate" : "vLLM")));
    fillSelect("#precision", options.precisions);
    fillSelect("#quant", ["", ...options.quants.filter((q) => q !== "none")],
      ["as the method implies", ...options.quants.filter((q) => q !== "none")]);
    fillSelect("#optimizer", options.optimizers);
    fillSelect("#master_weights", ["", ...options.master_weights], ["default: the framework's, else fp32 copy",
      ...options.master_weights.map((m) => ({
      auto: "auto (fp32 under ZeRO / TP / fp8)", fp32: "fp32 copy (mixed precision)", none: "none (16-bit in place)" }[m] || m))]);
    fillSelect("#estimator", options.estimators, options.estimators.map((e) => ({ tuneplan: "tuneplan (physics, calibrated)",
      kavier: "Kavier", xia: "Xia et al. 2024", planner: "Run Planner seed (6ND)" }[e] || e)));
    fillSelect("#adapter_dtype", options.adapter_dtypes, options.adapter_dtypes.map((m) => (m === "fp32" ? "fp32 (peft >= 0.12)" : "compute dtype")));
    fillSelect("#padding", ["", ...options.paddings], ["default: the framework's",
      ...options.paddings.map((m) => (m === "max" ? "to sequence length" : "to longest in batch"))]);
    fillSelect("#moe_experts", ["", ...options.moe_experts], ["default: the framework's (hf-trainer stacked)",
      ...options.moe_experts.map((m) => (m === "stacked" ? "stacked tensors (transformers >= 5)" : "a module per expert (transformers 4)"))]);
    fillSelect("#optimizer_impl", ["", ...options.optimizer_impls], ["default: the framework's",
      ...options.optimizer_impls.map((m) => ({ foreach: "foreach (torch's default)", fused: "fused kernel",
        "for-loop": "one tensor at a time" }[m] || m))]);
    fillSelect("#grad_accum_sync", ["", ...options.grad_accum_syncs], ["default: the framework's",
      ...options.grad_accum_syncs.map((m) => ({ "every-micro-batch": "reduce every micro-batch (sharded)",
        "no-sync": "no_sync until the last (unsharded)" }[m] || m))]);
    fillSelect("#fsdp_adapter_wrap", ["", ...options.fsdp_adapter_wraps], ["default: the framework's",
      ...options.fsdp_adapter_wraps.map((m) => ({ separate: "in their own units (peft, FSDP2)",
        "with-block": "inside each block's flat parameter (FSDP1)" }[m] || m))]);
    fillSelect("#moe_mode", options.moe_modes, options.moe_modes.map((m) => (m === "sparse" ? "sparse (top-k)" : "dense (all experts)")));
    fillSelect("#sharding", options.shardings);
    fillSelect("#framework", ["", ...(options.frameworks || [])], ["hf-trainer (not given: the HF Trainer's current defaults)", ...(options.frameworks || [])]);
    fillSelect("#ckpt_mode", ["", ...(options.ckpt_modes || [])], ["as the checkbox", ...(options.ckpt_modes || [])]);
    fillSelect("#objective", options.objectives);
    fillSelect("#provider", ["", ...options.providers], ["cheapest on-demand", ...options.providers]);
    setupGpus();
    setupModelSearch();
    readUrl();
    const m = S.modelsByName.get(getField("model"));
    if (m) showModelInfo(m);
    $("#version").textContent = "";
    fetch("/healthz").then((r) => r.json()).then((h) => { $("#version").textContent = `tuneplan ${h.version}`; }).catch(() => {});
    if (!options.plan_available) $("#tab-plan").title = "the planner is not installed in this version";

    setupFromConfig();
    form.addEventListener("input", (e) => {
      if (e.target.id === "model-search" || e.target.id.startsWith("from") || e.target.id.startsWith("data-")) return;
      if (e.target.id === "config_json" || e.target.id === "config_name") { checkConfig(); }
      schedule();
    });
    form.addEventListener("change", (e) => {
      if (e.target.id !== "model-search" && !e.target.id.startsWith("from") && !e.target.id.startsWith("data-")) schedule();
    });
    form.addEventListener("submit", (e) => e.preventDefault());
    $("#config-box").addEventListener("toggle", () => { if ($("#config_json").value.trim()) { checkConfig(); schedule(0); } });
    for (const t of $$(".tabs button")) t.addEventListener("click", () => setView(t.dataset.view));
    $("#copy-command").addEventListener("click", (e) => copyText($("#command").textContent, e.currentTarget));
    $("#share").addEventListener("click", (e) => { writeUrl(collect()); copyText(location.href, e.currentTarget); });
    $("#plan-table thead").addEventListener("click", (e) => { const th = e.target.closest("th"); if (th) sortBy(th.dataset.key); });
    $("#plan-table thead").addEventListener("keydown", (e) => {
      const th = e.target.closest("th");
      if (th && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); sortBy(th.dataset.key); }
    });
    if (window.ResizeObserver) {
      let w = 0;
      new ResizeObserver(() => {
        const nw = $("#plan-chart").clientWidth;
        if (S.chart && Math.abs(nw - w) > 20) { w = nw; drawChart(); }
      }).observe($("#plan-chart"));
    }
    if (usingConfig()) checkConfig();
    schedule(0);
  }

  start().catch((e) => showErrors([{ loc: [], msg: `the page could not start: ${e.message}` }]));
})();
