package scan

// ReadPartJSON is readPartJSON, the decode that Part must agree with.
var ReadPartJSON = readPartJSON
