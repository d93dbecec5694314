package sampling

import "testing"

func FuzzParseStrategy(f *testing.F) {
	for _, s := range []string{
		`{"strategyType": "PROBABILISTIC", "probabilisticSampling": {"samplingRate": 0.25}}`,
		`{"strategyType": 1, "rateLimitingSampling": {"maxTracesPerSecond": 5}}`,
		`{"operationSampling": {"defaultSamplingProbability": 0.1, "perOperationStrategies": [{"operation": "a", "probabilisticSampling": {"samplingRate": 2}}]}}`,
		`{"operationSampling": {"perOperationStrategies": [{"operation": 1}]}}`, `[]`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseStrategy(b)
		if err != nil {
			return
		}
		for _, name := range []string{"a", "b"} {
			sp := st.SpecFor(name, true)
			if sp.Ratio < 0 || sp.Ratio > 1 {
				t.Fatalf("ratio %v out of [0, 1] from %s", sp.Ratio, b)
			}
		}
	})
}
