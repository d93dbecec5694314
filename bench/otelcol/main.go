// Program otelcol-bench is the smallest OpenTelemetry Collector that can stand beside weft in
// `make bench`: the core OTLP receiver (gRPC and HTTP) and the `nop` exporter, which drops what it
// is given. It measures what the Collector spends to receive, decode and hand on OTLP traces,
// storing nothing. Built by scripts/otelcol.sh; the wiring mirrors what the official
// `go.opentelemetry.io/collector/cmd/builder` generates for the same component list.
package main

import (
	"os"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/nopexporter"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func components() (otelcol.Factories, error) {
	var err error
	factories := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	if factories.Extensions, err = otelcol.MakeFactoryMap[extension.Factory](); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](nopexporter.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Processors, err = otelcol.MakeFactoryMap[processor.Factory](); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Connectors, err = otelcol.MakeFactoryMap[connector.Factory](); err != nil {
		return otelcol.Factories{}, err
	}
	factories.ReceiverModules = map[component.Type]string{
		otlpreceiver.NewFactory().Type(): "go.opentelemetry.io/collector/receiver/otlpreceiver " + version,
	}
	factories.ExporterModules = map[component.Type]string{
		nopexporter.NewFactory().Type(): "go.opentelemetry.io/collector/exporter/nopexporter " + version,
	}
	return factories, nil
}

// version is the collector release every go.opentelemetry.io/collector v0.x module in go.mod is
// pinned to. scripts/otelcol.sh reads it. v0.162.0 is the newest release whose every module the
// proxy serves here (from v0.163.0 on, otlpreceiver needs internal/statusutil, which it refuses).
const version = "v0.162.0"

// stableVersion is the tag of the same release's stable (v1.x) modules.
const stableVersion = "v1.68.0"

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "otelcol-bench",
			Description: "OpenTelemetry Collector (otlp receiver, nop exporter) for weft's benchmarks",
			Version:     version,
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(),
					fileprovider.NewFactory(),
					yamlprovider.NewFactory(),
				},
			},
		},
		ProviderModules: map[string]string{
			"env":  "go.opentelemetry.io/collector/confmap/provider/envprovider " + stableVersion,
			"file": "go.opentelemetry.io/collector/confmap/provider/fileprovider " + stableVersion,
			"yaml": "go.opentelemetry.io/collector/confmap/provider/yamlprovider " + stableVersion,
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		// cobra has already printed the error.
		os.Exit(1)
	}
}
