package io.weft.sdk;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.weft.sdk.id.Hex;
import io.weft.sdk.id.XrayTraceId;
import io.weft.sdk.internal.Latin1;
import io.weft.sdk.propagation.Traceparent;
import io.weft.sdk.propagation.XrayPropagator;
import io.weft.sdk.trace.WeftSpanContext;
import org.junit.jupiter.api.Test;

/** The one-pass (SWAR) hex decoding behind the traceparent and X-Ray parsers. */
class HeaderCodecTest {
  static final String TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  static final String XRAY = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

  static long reference8(String s, int off) {
    long x = 0;
    for (int i = 0; i < 8; i++) {
      int d = Hex.digit(s.charAt(off + i));
      if (d < 0) {
        return -1;
      }
      x = x << 4 | d;
    }
    return x;
  }

  @Test
  void hex8MatchesTheDigitTableForEveryCharacterAtEveryPosition() {
    char[] base = "0123abcd".toCharArray();
    for (int pos = 0; pos < 8; pos++) {
      for (int c = 0; c <= 0xffff; c++) {
        char[] t = base.clone();
        t[pos] = (char) c;
        String s = new String(t);
        assertEquals(reference8(s, 0), Hex.hex8(s, 0), () -> "input " + s);
      }
    }
    assertEquals(0x0123abcdL, Hex.hex8("x0123abcd", 1));
    assertEquals(0xffffffffL, Hex.hex8("ffffffff", 0));
    assertEquals(0, Hex.hex8("00000000", 0));
  }

  @Test
  void wordChecksAcceptExactlyTheLowercaseDigitsForEveryByteAtEveryPosition() {
    // hexBits has no separate ASCII test: a byte of 0x80 or more must fail on its own, whatever
    // carries the bytes above it receive (the parsers rely on this).
    byte[] base = "0123abcd".getBytes(java.nio.charset.StandardCharsets.ISO_8859_1);
    for (int pos = 0; pos < 8; pos++) {
      for (int b = 0; b < 256; b++) {
        byte[] t = base.clone();
        t[pos] = (byte) b;
        long w = java.nio.ByteBuffer.wrap(t).getLong();
        String s = new String(t, java.nio.charset.StandardCharsets.ISO_8859_1);
        long want = reference8(s, 0);
        boolean good = (Hex.hexBits(w) & Hex.HIGH_BITS) == Hex.HIGH_BITS;
        assertEquals(want >= 0, good, () -> "input " + s);
        if (good) {
          assertEquals(want << 32 | 0x0123abcdL,
              Hex.decode16(w, java.nio.ByteBuffer.wrap(base).getLong()));
        }
      }
    }
    java.util.Random r = new java.util.Random(7);
    byte[] digits = "0123456789abcdef".getBytes(java.nio.charset.StandardCharsets.ISO_8859_1);
    for (int i = 0; i < 100_000; i++) {
      byte[] t = new byte[16];
      for (int j = 0; j < 16; j++) {
        // mostly digits, some anything: several bad bytes in one word, high bytes among them
        t[j] = r.nextInt(4) == 0 ? (byte) r.nextInt(256) : digits[r.nextInt(16)];
      }
      java.nio.ByteBuffer bb = java.nio.ByteBuffer.wrap(t);
      long a = bb.getLong(0);
      long b = bb.getLong(8);
      String s = new String(t, java.nio.charset.StandardCharsets.ISO_8859_1);
      long ra = reference8(s, 0);
      long rb = reference8(s, 8);
      assertEquals(ra >= 0, (Hex.hexBits(a) & Hex.HIGH_BITS) == Hex.HIGH_BITS, s);
      assertEquals(rb >= 0, (Hex.hexBits(b) & Hex.HIGH_BITS) == Hex.HIGH_BITS, s);
      if (ra >= 0 && rb >= 0) {
        assertEquals(ra << 32 | rb, Hex.decode16(a, b), s);
      }
    }
  }

  @Test
  void headersRejectEveryNonDigitByteAtEveryDigitPosition() {
    String xray = "1-5759e988-bd862e3fe1be46a994272793";
    for (String header : new String[] {TP, xray}) {
      for (int i = 0; i < header.length(); i++) {
        char was = header.charAt(i);
        for (int c = 0; c < 256; c++) {
          String t = header.substring(0, i) + (char) c + header.substring(i + 1);
          boolean want;
          if (was == '-' || (header == xray && i < 2)) {
            want = c == was;
          } else {
            want = Hex.digit((char) c) >= 0 && !(header == TP && i < 2 && t.startsWith("ff"));
          }
          boolean got = header == TP ? new Traceparent().parse(t)
              : new XrayTraceId().parse(t, 0, t.length());
          assertEquals(want, got, t);
        }
      }
    }
  }

  @Test
  void latin1BytesAreTheStringsOwnOnlyWhenEveryCharacterIsLatin1() {
    // The build's JDK is 17: the fast path must be on, or the exhaustive test above would only
    // cover charAt.
    assertEquals(Runtime.version().feature() <= 22, Latin1.enabled());
    if (!Latin1.enabled()) {
      return;
    }
    String latin = new StringBuilder("0123abc").append('\u00e9').toString();
    assertArrayEquals(new byte[] {'0', '1', '2', '3', 'a', 'b', 'c', (byte) 0xe9},
        Latin1.bytes(latin));
    assertNull(Latin1.bytes("0123abc\u0130"));
    assertNull(Latin1.bytes(null));
    assertThrows(NullPointerException.class, () -> Hex.hex8((String) null, 0));
    // A substring has its own array from offset 0, as hex8's offsets assume.
    assertEquals(0x0123abcdL, Hex.hex8("--0123abcd--".substring(2, 10), 0));
  }

  @Test
  void hex8RejectsNeighboursOfTheDigitRanges() {
    for (String bad : new String[] {"0000000/", "0000000:", "0000000`", "0000000g", "0000000A",
        "0000000F", "0000000 ", "0000000\u00e9", "0000000\u0130", "\u01300000000"}) {
      assertEquals(-1, Hex.hex8(bad, 0), bad);
    }
    assertEquals(-1, Hex.hex2("0G", 0) >= 0 ? 0 : -1);
    assertEquals(0xff, Hex.hex2("ff", 0));
    assertTrue(Hex.hex2("F0", 0) < 0);
    assertTrue(Hex.hex2("0\u0130", 0) < 0);
  }

  @Test
  void traceparentParsesAndRejects() {
    Traceparent tp = new Traceparent();
    assertTrue(tp.parse(TP));
    assertEquals(0x4bf92f3577b34da6L, tp.traceIdHigh);
    assertEquals(0xa3ce929d0e0e4736L, tp.traceIdLow);
    assertEquals(0x00f067aa0ba902b7L, tp.spanId);
    assertEquals(1, tp.flags);
    // A bad character at every hex position, in every SWAR word.
    for (int i = 0; i < TP.length(); i++) {
      if (TP.charAt(i) == '-') {
        continue;
      }
      for (char c : new char[] {'A', 'g', '/', ':', '\u0130', '\u00e9', '\u00b0', '-'}) {
        String s = TP.substring(0, i) + c + TP.substring(i + 1);
        assertFalse(new Traceparent().parse(s), s);
        assertNull(Traceparent.parseSpanContext(s), s);
      }
    }
    String upper = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01";
    assertFalse(tp.parse(upper), "upper-case hex is invalid (W3C)");
    assertFalse(tp.parse("ff" + TP.substring(2)), "version ff");
    assertFalse(tp.parse(TP.substring(0, 54)), "too short");
    assertFalse(tp.parse(TP + "-"), "version 00 with a suffix");
    assertFalse(tp.parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), "zero trace");
    assertFalse(tp.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"), "zero span");
    assertFalse(tp.parse("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "separator");
    assertTrue(tp.parse("01" + TP.substring(2) + "-what-the-future-holds"), "future version");
    assertFalse(tp.parse("01" + TP.substring(2) + "x"), "future version, no dash");
    assertTrue(tp.parse("cc" + TP.substring(2, 53) + "ff"));
    assertEquals(1, tp.flags, "future versions keep only the sampled flag");
    WeftSpanContext sc = Traceparent.parseSpanContext(TP);
    assertNotNull(sc);
    assertTrue(sc.isRemote());
    assertEquals(TP, sc.traceparentHeader());
  }

  @Test
  void xrayTraceIdParsesAndRejects() {
    XrayTraceId id = new XrayTraceId();
    String s = "1-5759e988-bd862e3fe1be46a994272793";
    assertTrue(id.parse(s, 0, s.length()));
    assertEquals(0x5759e988bd862e3fL, id.high);
    assertEquals(0xe1be46a994272793L, id.low);
    assertTrue(id.parse("1-5759e98-bd862e3fe1be46a994272793", 0, 34), "7-digit epoch");
    assertEquals(0x05759e98bd862e3fL, id.high);
    assertTrue(id.parse("x1-1-000000000000000000000001y", 1, 29), "1-digit epoch, in a range");
    assertEquals(0x100000000L, id.high);
    assertEquals(1, id.low);
    for (int i = 2; i < s.length(); i++) {
      if (i == 10) {
        continue;
      }
      for (char c : new char[] {'A', 'g', '\u0130', '\u00e9', '\u00b0', '-'}) {
        String t = s.substring(0, i) + c + s.substring(i + 1);
        assertFalse(new XrayTraceId().parse(t, 0, t.length()), t);
      }
    }
    assertFalse(id.parse("2-5759e988-bd862e3fe1be46a994272793", 0, 35), "version");
    // A range whose end overflows int still has 35 characters: refused, never read unchecked.
    int far = Integer.MAX_VALUE - 2;
    assertFalse(id.parse(s, far, far + 35), "an offset past the string");
    assertFalse(id.parse("1_5759e988-bd862e3fe1be46a994272793", 0, 35), "first separator");
    assertFalse(id.parse("1-5759e988_bd862e3fe1be46a994272793", 0, 35), "second separator");
    assertTrue(id.parse("Root=1-5759e988-bd862e3fe1be46a994272793;", 5, 40), "8-digit epoch, in a range");
    assertEquals(0x5759e988bd862e3fL, id.high);
    assertEquals(0xe1be46a994272793L, id.low);
    assertTrue(id.parse("\u0130=1-5759e988-bd862e3fe1be46a994272793", 2, 37), "in a UTF-16 string");
    assertEquals(0xe1be46a994272793L, id.low);
    assertFalse(id.parse("1-05759e988-bd862e3fe1be46a994272793", 0, 36), "9-digit epoch");
    assertFalse(id.parse("1-5759e988-bd862e3fe1be46a99427279", 0, 34), "23-digit unique part");
    assertFalse(id.parse("1--bd862e3fe1be46a994272793", 0, 27), "empty epoch");
    assertFalse(id.parse("1-00000000-000000000000000000000000", 0, 35), "all zero");
    assertTrue(id.parse("1-00000000-000000000000000000000001", 0, 35));
    assertTrue(id.parse("1-00000001-000000000000000000000000", 0, 35), "low half zero is valid");
  }

  @Test
  void xrayHeaderParsesInPlace() {
    WeftSpanContext sc = XrayPropagator.parse(XRAY);
    assertNotNull(sc);
    assertEquals(0x5759e988bd862e3fL, sc.traceIdHigh());
    assertEquals(0x53995c3f42cd8ad8L, sc.spanIdLong());
    assertTrue(sc.isSampled());
    assertNull(sc.xrayLineage());
    sc = XrayPropagator.parse(" Sampled = ? ; Parent= 53995c3f42cd8ad8 ;Self=1-x;"
        + "Root =1-5759e98-bd862e3fe1be46a994272793;;Lineage= a87bd80c:1|68fd508a:5 ");
    assertNotNull(sc);
    assertFalse(sc.isSampled());
    assertEquals(0x05759e98bd862e3fL, sc.traceIdHigh());
    assertEquals("a87bd80c:1|68fd508a:5", sc.xrayLineage());
    assertEquals(0x1L, XrayPropagator.parse(
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Parent=0000000000000001")
        .spanIdLong(), "a repeated key: the last wins");
    for (String bad : new String[] {
        "Root=1-5759e988-bd862e3fe1be46a994272793",
        "Parent=53995c3f42cd8ad8",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995C3F42CD8AD8",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8a",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=0000000000000000",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=2",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=11",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;junk",
        "root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
        "Root=1-5759E988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
        "Root=1-5759e988-bd862e3fe1be46a99427279\u0130;Parent=53995c3f42cd8ad8",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad\u0130",
        ""}) {
      assertNull(XrayPropagator.parse(bad), bad);
    }
  }

  static String describe(WeftSpanContext sc) {
    return sc == null ? "null" : Long.toHexString(sc.traceIdHigh()) + "/"
        + Long.toHexString(sc.traceIdLow()) + "/" + sc.spanIdLong() + "/" + sc.isSampled() + "/"
        + sc.xrayLineage();
  }

  @Test
  void xrayCanonicalHeaderParsesAsTheFieldScanDoes() {
    // A leading space makes the header 75 characters, which never takes the fixed-offset path:
    // both must give the same context for every one-character change of the canonical form
    // (every Latin-1 character, which the byte-wise path reads, and one beyond it).
    assertEquals(74, XRAY.length());
    for (int i = 0; i < XRAY.length(); i++) {
      for (int c = 0; c <= 0x100; c++) {
        String m = XRAY.substring(0, i) + (c == 0x100 ? '\u0130' : (char) c)
            + XRAY.substring(i + 1);
        assertEquals(describe(XrayPropagator.parse(" " + m)), describe(XrayPropagator.parse(m)), m);
      }
    }
    // Canonical offsets, but the Root value ends early and an unknown field fills the gap: the
    // fixed offsets misread it, and the scan's answer (a valid context) is the one returned.
    String early = "Root=1-57591-bd862e3fe1be46a994272793;a=;Parent=53995c3f42cd8ad8;Sampled=1";
    assertEquals(74, early.length());
    WeftSpanContext sc = XrayPropagator.parse(early);
    assertNotNull(sc);
    assertEquals(0x57591bd862e3fL, sc.traceIdHigh());
  }
}
