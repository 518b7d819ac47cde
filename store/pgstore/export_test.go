package pgstore

// MigrateTo exposes migrateTo to the tests.
var MigrateTo = migrateTo
