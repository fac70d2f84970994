// toolwire-client: a typed Node client for toolwire.
export * from "./client";
export * from "./errors";
export * from "./locate";
export * from "./methods";
export type * from "./protocol";
