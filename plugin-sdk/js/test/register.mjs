// Loaded with `node --import` before the tests: resolves the contract's host import, which
// only a wasm component has, to the stand-in in fake-host.mjs.
import { register } from "node:module";

register("./hooks.mjs", import.meta.url);
