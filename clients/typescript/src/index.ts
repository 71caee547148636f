/**
 * Tenure client for Node.js: the generated gRPC stubs of `tenure.v1` and a
 * thin session helper that renews a lease in the background and signals its
 * loss through an AbortSignal.
 *
 * @packageDocumentation
 */
export {
  TenureClient,
  type AcquireOptions,
  type ClientOptions,
  type FenceKeys,
  type GroupAcquireOptions,
  type LeaseState,
  type WatchOptions,
} from "./client";
export { Session, type RenewalOptions } from "./session";
export { GroupSession } from "./group";
export { Semaphore, type SemaphoreAcquireOptions } from "./semaphore";
export { RWLock, type RWLockAcquireOptions } from "./rwlock";
export type { RenewalStats } from "./keepalive";
export { ELECTION_VALUE_KEY, Elections, LeaderElector, type ElectorOptions, type Leader } from "./election";
export { FencingGuard } from "./fencing";
export { FENCE_HEADER, fenceHeaders, FENCING_TOKEN_HEADER } from "./fenceproof";
export {
  ERROR_DOMAIN,
  ErrorReason,
  errorReasonToJSON,
  isRetryable,
  LeaseLostError,
  parseReason,
  Reason,
  RETRYABLE_REASONS,
  TenureError,
  type LossReason,
} from "./errors";
export {
  EventType,
  eventTypeToJSON,
  LockMode,
  lockModeToJSON,
  type FenceKey,
  type Lease,
  type LeaseEvent,
} from "./gen/tenure/v1/lease";
/** The raw generated messages and stubs of `tenure.v1`. */
export * as v1 from "./gen/tenure/v1/lease";
/** The raw generated messages and stubs of `tenure.v1.ElectionService`. */
export * as electionV1 from "./gen/tenure/v1/election";
