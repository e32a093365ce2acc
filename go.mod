module github.com/dcc-flow/dcc-flow

go 1.26.8

require (
	github.com/theory/jsonpath v0.12.1
	gopkg.in/yaml.v3 v3.0.1
)

require github.com/kr/text v0.2.0 // indirect
