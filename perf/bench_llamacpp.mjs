#!/usr/bin/env node
// Prefill timing of llama.cpp through node-llama-cpp 3.21.1 (prebuilt CPU backends; the package picks the CPU
// variant, e.g. libggml-cpu-zen4.so, at load time and reports it as cpu_variant).
//
//   node perf/bench_llamacpp.mjs --gguf $PERF_DIR/d2b-q8_0.gguf --model d2b --ns 128,512,2048 \
//        [--threads 2] [--reps 3] [--prompts $PERF_DIR/prompts] [--label llama.cpp-q8_0]
//
// node-llama-cpp must be installed in $PERF_DIR/node (NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm i -E node-llama-cpp@3.21.1;
// setup.sh does), or NODE_LLAMA_CPP_DIR must point at the folder holding its node_modules.  PERF_DIR defaults to
// ${XDG_CACHE_HOME:-$HOME/.cache}/decider-perf, as in env.sh.
// For each N: a context of N+16 tokens with batch (= ubatch) N, one untimed warm-up prefill of the N prompt ids
// ($PERF_DIR/prompts/ids_<N>.json: the exact row the decider server runs for req_<N>.json), then `reps` timed
// prefills, each after clearHistory(). Prefill only: evaluateWithoutGeneratingNewTokens. Prints one JSON line per N.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
    if (a.startsWith("--")) acc.push([a.slice(2), all[i + 1]]);
    return acc;
}, []));
if (!args.gguf || "help" in args || "h" in args) {
    console.error("usage: node bench_llamacpp.mjs --gguf FILE [--model NAME] [--ns 128,512,2048] [--threads 2] [--reps 3]\n" +
                  "                              [--prompts DIR] [--label llama.cpp-q8_0]   (one JSON line per N on stdout)");
    process.exit("help" in args || "h" in args ? 0 : 2);
}
const gguf = args.gguf;
const model = args.model ?? path.basename(gguf);
const ns = (args.ns ?? "512").split(",").map(Number);
const threads = Number(args.threads ?? 2);
const reps = Number(args.reps ?? 3);
const perfDir = process.env.PERF_DIR
    ? path.resolve(process.env.PERF_DIR)
    : path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache"), "decider-perf");
const promptsDir = args.prompts ?? path.join(perfDir, "prompts");
const label = args.label ?? `llama.cpp-${path.basename(gguf).replace(/\.gguf$/, "").split("-").slice(-1)[0]}`;
const nodeDir = process.env.NODE_LLAMA_CPP_DIR ?? path.join(perfDir, "node");

const require = createRequire(path.join(nodeDir, "package.json"));
const { getLlama } = await import(require.resolve("node-llama-cpp"));

function status() {
    const s = fs.readFileSync("/proc/self/status", "utf8");
    const kb = (k) => Number((s.match(new RegExp(`^${k}:\\s+(\\d+) kB`, "m")) || [0, 0])[1]);
    return { rss_mib: Math.round(kb("VmRSS") / 1024), hwm_mib: Math.round(kb("VmHWM") / 1024),
             rss_anon_mib: Math.round(kb("RssAnon") / 1024), rss_file_mib: Math.round(kb("RssFile") / 1024) };
}
const loadavg = () => os.loadavg().map((x) => Math.round(x * 100) / 100);
const cpuSeconds = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };

const llama = await getLlama({ gpu: false, build: "never", maxThreads: threads, logLevel: "error" });
const t0 = performance.now();
const lm = await llama.loadModel({ modelPath: gguf, gpuLayers: 0 });
const loadS = (performance.now() - t0) / 1000;
const afterLoad = status();
// The CPU backend variant the prebuilt binary picked (GGML_CPU_ALL_VARIANTS: libggml-cpu-<variant>.so).
const cpuVariant = [...new Set((fs.readFileSync("/proc/self/maps", "utf8").match(/libggml-cpu-[a-z0-9_]+\.so/g) || []))].join(",");
console.error(JSON.stringify({ system: label, model, gguf, load_s: +loadS.toFixed(2), ...afterLoad,
                               arch: lm.fileInfo?.metadata?.general?.architecture, build: llama.buildType, cpu_variant: cpuVariant,
                               release: llama.llamaCppRelease, system_info: llama.systemInfo }));

for (const n of ns) {
    const idsFile = path.join(promptsDir, `ids_${n}.json`);
    const ids = JSON.parse(fs.readFileSync(idsFile, "utf8")).ids;
    const ctx = await lm.createContext({ contextSize: ids.length + 16, batchSize: ids.length,
                                         threads: { ideal: threads, min: threads }, sequences: 1 });
    const seq = ctx.getSequence();
    const runs = [];
    const cpu = [];
    for (let r = 0; r <= reps; r++) {
        await seq.clearHistory();
        const load = loadavg();
        const c0 = cpuSeconds();
        const s0 = performance.now();
        await seq.evaluateWithoutGeneratingNewTokens(ids);
        const dt = (performance.now() - s0) / 1000;
        if (r > 0) { runs.push(dt); cpu.push(cpuSeconds() - c0); }   // r = 0: untimed warm-up
        if (r === reps) {
            const best = Math.min(...runs);
            const st = status();
            console.log(JSON.stringify({
                system: label, model, N: ids.length, seconds: +best.toFixed(3), tok_s: +(ids.length / best).toFixed(2),
                runs_s: runs.map((x) => +x.toFixed(3)), cpu_s: cpu.map((x) => +x.toFixed(2)), threads,
                load_avg_start_last: load, load_avg_end: loadavg(), rss_after_load_mib: afterLoad.rss_mib,
                rss_mib: st.rss_mib, peak_rss_mib: st.hwm_mib, flash_attention: ctx.flashAttention,
                batch: ctx.batchSize, ctx: ctx.contextSize, gguf: path.basename(gguf), load_s: +loadS.toFixed(2),
                cpu_variant: cpuVariant,
                when: new Date().toISOString(),
            }));
        }
    }
    await ctx.dispose();
}
await lm.dispose();
await llama.dispose();
