// The ES module entry point of @tenure/client: the CommonJS build re-exported,
// so `import` and `require` share one copy of the classes (instanceof works
// across both).
export * from "../dist/src/index.js";
