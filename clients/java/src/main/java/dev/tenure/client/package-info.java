/**
 * A thin session helper over the generated Tenure gRPC stubs ({@code dev.tenure.v1}).
 *
 * <p>{@link dev.tenure.client.LeaseClient#acquire} takes a lease and returns a {@link
 * dev.tenure.client.Session} that renews it in the background and tells you, through {@link
 * dev.tenure.client.Session#isHeld()} and a {@link dev.tenure.client.Session.LossListener}, the
 * moment it can no longer be sure it holds the lease. Closing the session (try-with-resources)
 * releases the lease. {@link dev.tenure.client.LeaseClient#watch} streams lease events, every
 * failure is a {@link dev.tenure.client.TenureException} with a typed reason (the generated {@link
 * dev.tenure.v1.ErrorReason}) and whether retrying can help, and {@link
 * dev.tenure.client.FencingGuard} shows how a downstream store uses fencing tokens. A holding's
 * fence proof ({@link dev.tenure.client.Session#fenceProof()}, {@link
 * dev.tenure.client.Session#fenceHeaders()}) lets a store verify its token before trusting it.
 */
package dev.tenure.client;
