// Rolldown options merged into `jco componentize --bundle`: the contract's imports are
// provided by the host, not bundled.
export default {
  external: [/^kubeplug:plugin\//],
};
