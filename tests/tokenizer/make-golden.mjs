// make-golden.mjs: token ids from llama.cpp (through node-llama-cpp 3.22.1,
// CPU build, vocabulary only) for every string of a corpus, with special-token
// parsing off and on. No BOS (llama.cpp's add_special = false).
//
// usage: node make-golden.mjs MODEL.gguf CORPUS.json OUT.json
//   CORPUS.json: a JSON array of strings (valid UTF-8 only: JavaScript
//   strings cannot carry invalid bytes).
//   OUT.json: {"model", "model_sha256", "reference", "cases": [{"text", "ids", "ids_special"}]}
//
// node-llama-cpp is found with a normal import, or under $NODE_LLAMA_CPP_DIR
// (a folder where `npm i -E node-llama-cpp@3.22.1` was run). See README.md.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

async function loadNodeLlamaCpp() {
    try {
        return await import("node-llama-cpp");
    } catch (e) {
        const dir = process.env.NODE_LLAMA_CPP_DIR;
        if (!dir) throw new Error("node-llama-cpp not found: set NODE_LLAMA_CPP_DIR (see tests/tokenizer/README.md)");
        const entry = path.join(dir, "node_modules", "node-llama-cpp", "dist", "index.js");
        return await import(pathToFileURL(entry).href);
    }
}

const [modelPath, corpusPath, outPath] = process.argv.slice(2);
if (!outPath) {
    console.error("usage: node make-golden.mjs MODEL.gguf CORPUS.json OUT.json");
    process.exit(1);
}
const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
if (!Array.isArray(corpus) || corpus.some((s) => typeof s !== "string")) {
    console.error(`${corpusPath}: expected a JSON array of strings`);
    process.exit(1);
}
const {getLlama} = await loadNodeLlamaCpp();
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, vocabOnly: true});
const sha = crypto.createHash("sha256").update(fs.readFileSync(modelPath)).digest("hex");
const out = {
    model: path.basename(modelPath),
    model_sha256: sha,
    reference: "llama.cpp via node-llama-cpp 3.22.1 (model.tokenize(text, false|true), vocab only)",
    cases: corpus.map((text) => ({
        text,
        ids: Array.from(model.tokenize(text, false)),
        ids_special: Array.from(model.tokenize(text, true)),
    })),
};
// one case per line keeps diffs of the golden file readable
const lines = out.cases.map((c) => "  " + JSON.stringify(c));
const head = JSON.stringify({model: out.model, model_sha256: out.model_sha256, reference: out.reference});
fs.writeFileSync(outPath, head.slice(0, -1) + `,\n "cases": [\n${lines.join(",\n")}\n]}\n`);
console.log(`wrote ${outPath}: ${out.cases.length} cases`);
await model.dispose();
await llama.dispose();
