package opencode

// ReadPartJSON is readPartJSON, the decode that ScanPart must agree with.
var ReadPartJSON = readPartJSON
