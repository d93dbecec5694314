package io.weft.sdk.export;

import io.weft.sdk.trace.Version;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.time.Duration;
import java.util.Map;
import java.util.zip.GZIPOutputStream;

/** OTLP/HTTP with protobuf bodies over the JDK {@link HttpClient} (spec/otlp.md "OTLP/HTTP"). */
public final class OtlpHttpTransport implements OtlpTransport {
  private final URI endpoint;
  private final boolean gzip;
  private final Map<String, String> headers;
  private final HttpClient client;
  private final ByteArrayOutputStream gzipBuf = new ByteArrayOutputStream(64 * 1024);

  /**
   * @param endpoint the full URL ({@code http://host:4318/v1/traces})
   * @param gzip whether to send {@code Content-Encoding: gzip}
   * @param headers extra request headers
   */
  public OtlpHttpTransport(String endpoint, boolean gzip, Map<String, String> headers) {
    this.endpoint = URI.create(endpoint);
    this.gzip = gzip;
    this.headers = Map.copyOf(headers);
    this.client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
        .connectTimeout(Duration.ofSeconds(10)).build();
  }

  @Override
  public Outcome send(byte[] body, int len, long timeoutNanos) throws InterruptedException {
    byte[] payload;
    int plen;
    if (gzip) {
      gzipBuf.reset();
      try (GZIPOutputStream gz = new GZIPOutputStream(gzipBuf, 8192)) {
        gz.write(body, 0, len);
      } catch (IOException e) {
        return Outcome.permanent("gzip failed: " + e);
      }
      payload = gzipBuf.toByteArray();
      plen = payload.length;
    } else {
      payload = body;
      plen = len;
    }
    HttpRequest.Builder rb = HttpRequest.newBuilder(endpoint)
        .timeout(Duration.ofNanos(Math.max(1_000_000, timeoutNanos)))
        .header("Content-Type", "application/x-protobuf")
        .header("User-Agent", "weft-sdk-java/" + Version.VERSION)
        .POST(HttpRequest.BodyPublishers.ofByteArray(payload, 0, plen));
    if (gzip) {
      rb.header("Content-Encoding", "gzip");
    }
    headers.forEach(rb::header);
    try {
      HttpResponse<byte[]> resp = client.send(rb.build(), HttpResponse.BodyHandlers.ofByteArray());
      String ct = resp.headers().firstValue("content-type").orElse(null);
      byte[] respBody = ct == null || ct.startsWith("application/x-protobuf") ? resp.body() : null;
      return OtlpRetry.classifyHttp(resp.statusCode(), resp.headers().map(), respBody,
          System.currentTimeMillis());
    } catch (HttpTimeoutException e) {
      return OtlpRetry.classifyError("timeout: " + e.getMessage());
    } catch (ConnectException e) {
      return OtlpRetry.classifyError("connection refused: " + endpoint);
    } catch (IOException e) {
      return OtlpRetry.classifyError("i/o error: " + e);
    } catch (IllegalArgumentException e) {
      return Outcome.permanent("bad request: " + e.getMessage());
    }
  }

  @Override
  public String describe() {
    return endpoint.toString();
  }
}
