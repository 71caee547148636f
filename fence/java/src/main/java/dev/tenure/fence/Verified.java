package dev.tenure.fence;

import java.util.Objects;

/**
 * A fence proof whose signature verified against a pinned key: what it states and who signed it.
 *
 * <p>Verification says Tenure granted this holding; it does not say the holding is for the
 * resource being written. A store guarding a resource under one lease name must check {@link
 * #isFor(String)} before comparing tokens, so that a genuine token of another name never moves
 * this resource's highest token ({@link FenceFilter} does).
 *
 * @param fence what the proof states
 * @param keyId the id of the key that signed it: 16 lower-case hex digits, the first 8 bytes of
 *     SHA-256 of the public key
 */
public record Verified(Fence fence, String keyId) {

  /**
   * A verified proof; both parts must be present.
   *
   * @param fence what the proof states
   * @param keyId the signing key's id, 16 hex digits
   */
  public Verified {
    Objects.requireNonNull(fence, "fence");
    Objects.requireNonNull(keyId, "keyId");
  }

  /**
   * Whether the proof was signed for lease name {@code name}.
   *
   * @param name the lease name that guards the resource being written
   * @return true when the proof's lease name is exactly {@code name}
   */
  public boolean isFor(String name) {
    return fence.name().equals(name);
  }
}
