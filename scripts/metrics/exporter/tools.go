//go:build tools

package tools

import _ "github.com/prometheus/memcached_exporter/cmd/memcached_exporter"
