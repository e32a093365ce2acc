package engine

// Version is the dcc-flow release version.
const Version = "0.1.0"
