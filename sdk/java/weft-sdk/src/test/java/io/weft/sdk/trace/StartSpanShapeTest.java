package io.weft.sdk.trace;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import org.junit.jupiter.api.Test;

/**
 * The allocation budget of a span rests on the bytecode sizes of two methods (WeftSpanBuilder
 * "startSpan only hands the builder's fields to start()"): {@code startSpan} must stay tiny so
 * that C2 always inlines it and removes the builder, and {@code start} must stay above
 * {@code FreqInlineSize} (325 bytecodes by default) so that C2 never inlines it into
 * {@code startSpan}. An edit that moves either across its line reintroduces the 64-byte builder
 * per span (and, unsampled, the 56-byte span context that {@code startSpan} builds) without
 * failing anything else.
 */
class StartSpanShapeTest {
  @Test
  void startSpanIsTinyAndStartIsNeverInlined() throws IOException {
    int startSpan = codeLength(WeftSpanBuilder.class, "startSpan");
    int start = codeLength(WeftSpanBuilder.class, "start");
    // 95 bytecodes now that it builds the unsampled span context itself: above MaxInlineSize (35),
    // as it was at 43, so C2 inlines it where it is hot, far below FreqInlineSize (325).
    assertTrue(startSpan > 0 && startSpan <= 100, "startSpan is " + startSpan + " bytecodes");
    assertTrue(start > 325, "start is " + start + " bytecodes, so C2 may inline it");
  }

  /** The length of the Code attribute of the first method named {@code name}, or -1. */
  static int codeLength(Class<?> type, String name) throws IOException {
    try (InputStream in = type.getResourceAsStream(type.getSimpleName() + ".class")) {
      DataInputStream d = new DataInputStream(in);
      d.readInt(); // magic
      d.readInt(); // minor, major
      int count = d.readUnsignedShort();
      String[] utf8 = new String[count];
      for (int i = 1; i < count; i++) {
        int tag = d.readUnsignedByte();
        switch (tag) {
          case 1 -> utf8[i] = d.readUTF();
          case 3, 4, 9, 10, 11, 12, 17, 18 -> d.readInt();
          case 5, 6 -> {
            d.readLong();
            i++; // takes two entries
          }
          case 7, 8, 16, 19, 20 -> d.readUnsignedShort();
          case 15 -> {
            d.readUnsignedByte();
            d.readUnsignedShort();
          }
          default -> throw new IOException("constant pool tag " + tag);
        }
      }
      d.readUnsignedShort(); // access
      d.readUnsignedShort(); // this
      d.readUnsignedShort(); // super
      int interfaces = d.readUnsignedShort();
      for (int i = 0; i < interfaces; i++) {
        d.readUnsignedShort();
      }
      int fields = d.readUnsignedShort();
      for (int i = 0; i < fields; i++) {
        d.readUnsignedShort();
        d.readUnsignedShort();
        d.readUnsignedShort();
        skipAttributes(d);
      }
      int methods = d.readUnsignedShort();
      for (int i = 0; i < methods; i++) {
        d.readUnsignedShort(); // access
        String method = utf8[d.readUnsignedShort()];
        d.readUnsignedShort(); // descriptor
        int attributes = d.readUnsignedShort();
        for (int a = 0; a < attributes; a++) {
          String attribute = utf8[d.readUnsignedShort()];
          int len = d.readInt();
          if (attribute.equals("Code") && method.equals(name)) {
            d.readUnsignedShort(); // max_stack
            d.readUnsignedShort(); // max_locals
            return d.readInt();
          }
          d.skipNBytes(len);
        }
      }
      return -1;
    }
  }

  private static void skipAttributes(DataInputStream d) throws IOException {
    int attributes = d.readUnsignedShort();
    for (int a = 0; a < attributes; a++) {
      d.readUnsignedShort();
      d.skipNBytes(d.readInt());
    }
  }
}
