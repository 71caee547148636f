/**
 * Tenure fence proofs: fencing tokens a store can verify without calling Tenure.
 *
 * <p>A Tenure grant carries a <em>fence proof</em>: an Ed25519-signed statement that a lease
 * name's holding, with this fencing token, was granted by the Tenure deployment whose public keys
 * the store pinned. A store that verifies the proof, checks that it is for the lease name it
 * guards, and only then compares tokens can never be poisoned by a wrong, huge or foreign token:
 * it only ever records tokens Tenure granted for that name. The format, the verification order
 * and the error kinds are those of {@code docs/fencing.md}, the same in every language.
 *
 * <ul>
 *   <li>{@link dev.tenure.fence.Keyset}: the pinned public keys ({@code tenure fence-keys}) and
 *       the verifier;
 *   <li>{@link dev.tenure.fence.Fence} and {@link dev.tenure.fence.Verified}: what a verified
 *       proof states; {@link dev.tenure.fence.FenceException}: why one was refused;
 *   <li>{@link dev.tenure.fence.FenceFilter}: a servlet filter fencing HTTP writes by the {@code
 *       Tenure-Fence} and {@code Tenure-Fencing-Token} headers, with a {@link
 *       dev.tenure.fence.TokenStore} of the highest token per lease name ({@link
 *       dev.tenure.fence.MemoryTokenStore} in memory).
 * </ul>
 *
 * <p>Only the JDK is needed at run time (Ed25519 and SHA-256 from {@code java.security}); the
 * filter needs the Jakarta Servlet API (6.x) of its container.
 */
package dev.tenure.fence;
