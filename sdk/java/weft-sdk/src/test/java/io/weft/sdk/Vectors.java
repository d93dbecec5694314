package io.weft.sdk;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

/** Locates {@code spec/vectors} relative to the repository. */
public final class Vectors {
  private Vectors() {}

  /** The vectors directory: {@code $WEFT_SPEC_VECTORS}, else {@code ../../../spec/vectors}. */
  public static Path dir() {
    String env = System.getenv("WEFT_SPEC_VECTORS");
    Path p = env != null ? Paths.get(env) : Paths.get("../../../spec/vectors");
    if (!Files.isDirectory(p)) {
      // run from sdk/java instead of the module directory
      p = Paths.get("../../spec/vectors");
    }
    if (!Files.isDirectory(p)) {
      throw new IllegalStateException("spec/vectors not found (looked at " + p.toAbsolutePath()
          + "); set WEFT_SPEC_VECTORS");
    }
    return p.normalize();
  }
}
