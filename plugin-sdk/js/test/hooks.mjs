// Module resolution hook: `kubeplug:plugin/host@0.1.0` is the stand-in host.
export async function resolve(specifier, context, next) {
  if (specifier.startsWith("kubeplug:plugin/host@")) {
    return { url: new URL("./fake-host.mjs", import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
