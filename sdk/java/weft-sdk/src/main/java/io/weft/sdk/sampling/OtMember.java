package io.weft.sdk.sampling;

import io.weft.sdk.id.Hex;
import io.weft.sdk.trace.WeftSpanContext;
import io.weft.sdk.trace.WeftTraceState;
import java.util.ArrayList;
import java.util.List;

/** The {@code ot} tracestate member and its {@code th}/{@code rv} sub-keys (spec/sampling.md). */
public final class OtMember {
  private OtMember() {}

  /** The value of sub-key {@code key} ({@code th} or {@code rv}) of the {@code ot} member, or null. */
  static String subkey(WeftTraceState ts, String key) {
    String ot = ts.get("ot");
    if (ot == null) {
      return null;
    }
    String prefix = key + ":";
    for (String piece : ot.split(";", -1)) {
      if (piece.startsWith(prefix)) {
        return piece.substring(prefix.length());
      }
    }
    return null;
  }

  /** The threshold of a valid {@code th}, or -1. */
  static long threshold(WeftTraceState ts) {
    String th = subkey(ts, "th");
    if (th == null || th.isEmpty() || th.length() > 14 || !Hex.isHexAnyCase(th, 0, th.length())) {
      return -1;
    }
    return Hex.parseLongAnyCase(th, 0, th.length()) << (4 * (14 - th.length()));
  }

  /** The randomness R: a valid {@code rv}, else the low 56 bits of the trace ID. */
  static long randomness(WeftTraceState ts, long traceIdLow) {
    String rv = subkey(ts, "rv");
    if (rv != null && rv.length() == 14 && Hex.isHexAnyCase(rv, 0, 14)) {
      return Hex.parseLongAnyCase(rv, 0, 14);
    }
    return traceIdLow & 0x00ff_ffff_ffff_ffffL;
  }

  /** Sets {@code th} (first piece), as a modified member moved to the front. */
  static WeftTraceState setTh(WeftTraceState ts, String th) {
    String ot = ts.get("ot");
    List<String> pieces = new ArrayList<>();
    pieces.add("th:" + th);
    if (ot != null) {
      for (String piece : ot.split(";", -1)) {
        if (!piece.startsWith("th:")) {
          pieces.add(piece);
        }
      }
    }
    return replace(ts, ot, String.join(";", pieces));
  }

  /** Erases every {@code th} piece; removes {@code ot} when nothing is left. */
  static WeftTraceState eraseTh(WeftTraceState ts) {
    String ot = ts.get("ot");
    if (ot == null) {
      return ts;
    }
    List<String> pieces = new ArrayList<>();
    for (String piece : ot.split(";", -1)) {
      if (!piece.startsWith("th:")) {
        pieces.add(piece);
      }
    }
    if (pieces.isEmpty()) {
      return ts.without("ot");
    }
    return replace(ts, ot, String.join(";", pieces));
  }

  private static WeftTraceState replace(WeftTraceState ts, String old, String value) {
    if (value.equals(old) || value.length() > 256) {
      return ts;
    }
    return ts.without("ot").withFront("ot", value);
  }

  /** Whether the trace ID's randomness comes without the random flag (for the warning). */
  static boolean presumedRandom(WeftSpanContext parent) {
    return parent.isValid() && (parent.flags() & WeftSpanContext.RANDOM) == 0;
  }
}
