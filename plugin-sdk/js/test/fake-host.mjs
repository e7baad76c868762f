// The host imports outside a component: no cache, and no logging. A test that needs reads
// sets `objects` (JSON texts by "apiVersion/kind").
export const objects = new Map();

export function log() {}

export function getObject() {
  return undefined;
}

export function listObjects(kind) {
  return objects.get(`${kind.apiVersion}/${kind.kind}`) ?? [];
}
