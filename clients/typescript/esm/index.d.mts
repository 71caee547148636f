// Types of the ES module entry point: the same as the CommonJS build's.
export * from "../dist/src/index.js";
