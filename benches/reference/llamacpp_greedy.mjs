// Greedy continuations from llama.cpp itself on this machine, for the prompts of a reference file
// in ../shared/reference/*.greedy.jsonl: shows where llama.cpp's own output leaves the reference.
//
//   npm install node-llama-cpp@3.22.1        (the version that produced the reference files)
//   node benches/reference/llamacpp_greedy.mjs MODEL.gguf REF.greedy.jsonl [threads]
//
// Prints one JSON line per prompt: the first step where llama.cpp differs from the reference (16 =
// none in the first 16), and the 16 tokens' text, to compare with `cinder run MODEL --prompt P
// --temperature 0 --max-tokens 16 --ignore-eos`.
import { getLlama } from "node-llama-cpp";
import fs from "fs";

const [modelPath, refPath, threads] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never" });
const model = await llama.loadModel({ modelPath });
const ctx = await model.createContext({ contextSize: 256, threads: Number(threads || 1) });
const refs = fs.readFileSync(refPath, "utf8").trim().split("\n").map(JSON.parse);
for (const r of refs) {
  const seq = ctx.getSequence();
  const out = [];
  // The reference's own prompt token ids (BOS included), so only generation is compared.
  for await (const t of seq.evaluate(r.prompt_tokens, { temperature: 0 })) {
    out.push(t);
    if (out.length >= 16) break;
  }
  let same = 0;
  while (same < 16 && out[same] === r.greedy[same]) same++;
  console.log(JSON.stringify({ prompt: r.prompt, first_diff: same, tokens: out, text: model.detokenize(out) }));
  seq.dispose();
}
