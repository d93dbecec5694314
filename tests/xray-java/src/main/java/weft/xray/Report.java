package weft.xray;

import com.amazonaws.xray.AWSXRay;
import com.amazonaws.xray.AWSXRayRecorder;
import com.amazonaws.xray.AWSXRayRecorderBuilder;
import com.amazonaws.xray.entities.Segment;
import com.amazonaws.xray.entities.Subsegment;
import com.amazonaws.xray.strategy.sampling.AllSamplingStrategy;
import java.util.HashMap;
import java.util.Map;

/**
 * Records one trace with the AWS X-Ray SDK for Java and sends it to the daemon address in
 * {@code AWS_XRAY_DAEMON_ADDRESS}: a segment with HTTP data and an annotation, a remote
 * subsegment that fails with an exception, and a nested local subsegment. Prints the X-Ray trace
 * ID.
 */
public final class Report {
  public static void main(String[] args) throws Exception {
    AWSXRayRecorder recorder =
        AWSXRayRecorderBuilder.standard().withSamplingStrategy(new AllSamplingStrategy()).build();
    AWSXRay.setGlobalRecorder(recorder);
    Segment seg = recorder.beginSegment("inventory");
    Map<String, Object> request = new HashMap<>();
    request.put("method", "GET");
    request.put("url", "http://shop/inventory/42");
    seg.putHttp("request", request);
    seg.putAnnotation("sku", "sku-42");
    seg.putAnnotation("count", 3);
    seg.putMetadata("debug", "warehouse", "east");
    Subsegment call = recorder.beginSubsegment("warehouse");
    call.setNamespace("remote");
    Map<String, Object> response = new HashMap<>();
    response.put("status", 503);
    call.putHttp("response", response);
    call.addException(new IllegalStateException("warehouse unavailable"));
    Subsegment inner = recorder.beginSubsegment("retry-backoff");
    Thread.sleep(2);
    recorder.endSubsegment();
    recorder.endSubsegment();
    String traceId = seg.getTraceId().toString();
    recorder.endSegment();
    System.out.println(traceId);
  }
}
