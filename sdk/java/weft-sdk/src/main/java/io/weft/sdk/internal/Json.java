package io.weft.sdk.internal;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small strict JSON reader (RFC 8259) for the few JSON documents the SDK reads (Jaeger sampling
 * strategies). Objects become {@link LinkedHashMap}, arrays {@link ArrayList}, numbers
 * {@link Double}, and {@code null} the {@link #NULL} marker.
 */
public final class Json {
  /** The JSON {@code null}. */
  public static final Object NULL = new Object() {
    @Override
    public String toString() {
      return "null";
    }
  };

  private final String s;
  private int i;
  private int depth;

  private Json(String s) {
    this.s = s;
  }

  /** Parses a document; throws {@link IllegalArgumentException} when it is not valid JSON. */
  public static Object parse(String text) {
    Json j = new Json(text);
    j.ws();
    Object v = j.value();
    j.ws();
    if (j.i != text.length()) {
      throw j.error("trailing characters");
    }
    return v;
  }

  private IllegalArgumentException error(String what) {
    return new IllegalArgumentException("invalid json at offset " + i + ": " + what);
  }

  private void ws() {
    while (i < s.length()) {
      char c = s.charAt(i);
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        i++;
      } else {
        break;
      }
    }
  }

  private Object value() {
    if (i >= s.length()) {
      throw error("unexpected end");
    }
    if (++depth > 64) {
      throw error("nested too deeply");
    }
    try {
      char c = s.charAt(i);
      switch (c) {
        case '{':
          return object();
        case '[':
          return array();
        case '"':
          return string();
        case 't':
          return literal("true", Boolean.TRUE);
        case 'f':
          return literal("false", Boolean.FALSE);
        case 'n':
          return literal("null", NULL);
        default:
          return number();
      }
    } finally {
      depth--;
    }
  }

  private Object literal(String word, Object v) {
    if (!s.startsWith(word, i)) {
      throw error("bad literal");
    }
    i += word.length();
    return v;
  }

  private Map<String, Object> object() {
    Map<String, Object> m = new LinkedHashMap<>();
    i++;
    ws();
    if (i < s.length() && s.charAt(i) == '}') {
      i++;
      return m;
    }
    while (true) {
      ws();
      if (i >= s.length() || s.charAt(i) != '"') {
        throw error("expected member name");
      }
      String k = string();
      ws();
      if (i >= s.length() || s.charAt(i) != ':') {
        throw error("expected ':'");
      }
      i++;
      ws();
      m.put(k, value());
      ws();
      if (i >= s.length()) {
        throw error("unexpected end");
      }
      char c = s.charAt(i++);
      if (c == '}') {
        return m;
      }
      if (c != ',') {
        throw error("expected ',' or '}'");
      }
    }
  }

  private List<Object> array() {
    List<Object> l = new ArrayList<>();
    i++;
    ws();
    if (i < s.length() && s.charAt(i) == ']') {
      i++;
      return l;
    }
    while (true) {
      ws();
      l.add(value());
      ws();
      if (i >= s.length()) {
        throw error("unexpected end");
      }
      char c = s.charAt(i++);
      if (c == ']') {
        return l;
      }
      if (c != ',') {
        throw error("expected ',' or ']'");
      }
    }
  }

  private String string() {
    i++;
    StringBuilder sb = new StringBuilder();
    while (true) {
      if (i >= s.length()) {
        throw error("unterminated string");
      }
      char c = s.charAt(i++);
      if (c == '"') {
        return sb.toString();
      }
      if (c < 0x20) {
        throw error("control character in string");
      }
      if (c != '\\') {
        sb.append(c);
        continue;
      }
      if (i >= s.length()) {
        throw error("unterminated escape");
      }
      char e = s.charAt(i++);
      switch (e) {
        case '"':
        case '\\':
        case '/':
          sb.append(e);
          break;
        case 'b':
          sb.append('\b');
          break;
        case 'f':
          sb.append('\f');
          break;
        case 'n':
          sb.append('\n');
          break;
        case 'r':
          sb.append('\r');
          break;
        case 't':
          sb.append('\t');
          break;
        case 'u':
          if (i + 4 > s.length()) {
            throw error("bad unicode escape");
          }
          int cp = 0;
          for (int k = 0; k < 4; k++) {
            int d = Character.digit(s.charAt(i + k), 16);
            if (d < 0) {
              throw error("bad unicode escape");
            }
            cp = (cp << 4) | d;
          }
          i += 4;
          sb.append((char) cp);
          break;
        default:
          throw error("bad escape");
      }
    }
  }

  private Double number() {
    int start = i;
    if (i < s.length() && s.charAt(i) == '-') {
      i++;
    }
    if (i >= s.length()) {
      throw error("bad number");
    }
    if (s.charAt(i) == '0') {
      i++;
    } else if (s.charAt(i) >= '1' && s.charAt(i) <= '9') {
      while (i < s.length() && Character.isDigit(s.charAt(i)) && s.charAt(i) < 128) {
        i++;
      }
    } else {
      throw error("unexpected character");
    }
    if (i < s.length() && s.charAt(i) == '.') {
      i++;
      int d = i;
      while (i < s.length() && s.charAt(i) >= '0' && s.charAt(i) <= '9') {
        i++;
      }
      if (i == d) {
        throw error("bad fraction");
      }
    }
    if (i < s.length() && (s.charAt(i) == 'e' || s.charAt(i) == 'E')) {
      i++;
      if (i < s.length() && (s.charAt(i) == '+' || s.charAt(i) == '-')) {
        i++;
      }
      int d = i;
      while (i < s.length() && s.charAt(i) >= '0' && s.charAt(i) <= '9') {
        i++;
      }
      if (i == d) {
        throw error("bad exponent");
      }
    }
    return Double.valueOf(s.substring(start, i));
  }
}
