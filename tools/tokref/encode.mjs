#!/usr/bin/env node
// Reference tokenizer for pelican's tests: encodes texts exactly as transformers.js does
// (via @lenml/tokenizers, a dependency-free fork of transformers.js' tokenizer code).
//
// usage: node encode.mjs TOKENIZER [options] FILE...
//   TOKENIZER        a tokenizer.json file, or a folder holding tokenizer.json (+ tokenizer_config.json)
//   --lines          encode each line of each file separately (a line keeps its trailing "\n";
//                    a final line without "\n" is included; nothing else is dropped)
//   --text STRING    encode STRING (may be repeated; mixed with FILEs in command-line order)
//   --json FILE      encode each string of the JSON array of strings in FILE
//   --special        match special added tokens in the text ("<|im_start|>" -> one id); without it
//                    only non-special added tokens are matched, like pelican's parse_special=false
//                    (HF: split_special_tokens=True)
//   --add-special    add_special_tokens=true (BOS/EOS from the post-processor); default false
//   --decode         also decode the ids of every input (skip_special_tokens=false), both without
//                    clean-up ("decoded") and with the config's clean_up_tokenization_spaces
//                    ("decoded_clean"; transformers.js defaults it to true when the config has none)
//
// prints one JSON object: {"ids": [[...], ...], "decoded": [...]?, "decoded_clean": [...]?, "chars": N}
// "ids" has one array per input unit in order; "chars" counts UTF-16 code units encoded.
import fs from "node:fs";
import path from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";

function die(msg) {
  process.stderr.write(`encode.mjs: ${msg}\n`);
  process.exit(2);
}

function load_tokenizer(where) {
  let json_path = where;
  let dir = path.dirname(where);
  if (fs.existsSync(where) && fs.statSync(where).isDirectory()) {
    dir = where;
    json_path = path.join(where, "tokenizer.json");
  }
  if (!fs.existsSync(json_path)) die(`no tokenizer.json at ${json_path}`);
  const tokenizerJSON = JSON.parse(fs.readFileSync(json_path, "utf8"));
  const config_path = path.join(dir, "tokenizer_config.json");
  const tokenizerConfig = fs.existsSync(config_path)
    ? JSON.parse(fs.readFileSync(config_path, "utf8"))
    : {};
  return TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
}

// Makes the tokenizer match only non-special added tokens (pelican's parse_special=false).
function disable_special_matching(tok) {
  const plain = tok.added_tokens.filter((t) => !t.special);
  const Splitter = tok.added_tokens_splitter.constructor;
  tok.added_tokens_splitter = new Splitter(plain.map((t) => t.content));
  tok.added_tokens_map = new Map(plain.map((t) => [t.content, t]));
}

function split_lines(text) {
  const out = [];
  let start = 0;
  for (;;) {
    const nl = text.indexOf("\n", start);
    if (nl < 0) break;
    out.push(text.slice(start, nl + 1));
    start = nl + 1;
  }
  if (start < text.length) out.push(text.slice(start));
  return out;
}

process.on("uncaughtException", (e) => die(e && e.message ? e.message : String(e)));

const args = process.argv.slice(2);
if (args.length < 1 || args[0] === "--help") {
  die("usage: node encode.mjs TOKENIZER [--lines] [--special] [--add-special] [--decode] [--text S] FILE...");
}
const tok = load_tokenizer(args[0]);
let lines = false;
let special = false;
let add_special = false;
let decode = false;
const inputs = [];  // {kind: "file"|"text", value}
for (let i = 1; i < args.length; ++i) {
  const a = args[i];
  if (a === "--lines") lines = true;
  else if (a === "--special") special = true;
  else if (a === "--add-special") add_special = true;
  else if (a === "--decode") decode = true;
  else if (a === "--text") {
    if (i + 1 >= args.length) die("--text needs a value");
    inputs.push({ kind: "text", value: args[++i] });
  } else if (a === "--json") {
    if (i + 1 >= args.length) die("--json needs a file");
    const list = JSON.parse(fs.readFileSync(args[++i], "utf8"));
    if (!Array.isArray(list) || !list.every((x) => typeof x === "string")) die("--json: not an array of strings");
    for (const t of list) inputs.push({ kind: "text", value: t });
  } else if (a.startsWith("--")) die(`unknown option ${a}`);
  else inputs.push({ kind: "file", value: a });
}
if (!special) disable_special_matching(tok);

const units = [];
for (const inp of inputs) {
  const text = inp.kind === "file" ? fs.readFileSync(inp.value, "utf8") : inp.value;
  if (lines && inp.kind === "file") units.push(...split_lines(text));
  else units.push(text);
}

const result = { ids: [], chars: 0 };
if (decode) {
  result.decoded = [];
  result.decoded_clean = [];
}
for (const u of units) {
  const ids = tok.encode(u, { add_special_tokens: add_special });
  result.ids.push(ids);
  result.chars += u.length;
  // transformers.js refuses to decode an empty list; its text is "".
  if (decode) {
    const raw = { skip_special_tokens: false, clean_up_tokenization_spaces: false };
    result.decoded.push(ids.length ? tok.decode(ids, raw) : "");
    result.decoded_clean.push(ids.length ? tok.decode(ids, { skip_special_tokens: false }) : "");
  }
}
process.stdout.write(JSON.stringify(result));
process.stdout.write("\n");
