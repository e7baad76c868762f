// The host imports outside a component: an empty cache, logging to nowhere (the helpers
// under test make no host call; resource.ts imports this module all the same).
export function log() {}

export function getObject() {
  return undefined;
}

export function listObjects() {
  return [];
}
