<?php
// Checks Python's bytes in PHP. Reads JSON lines on stdin:
//   {"name": ..., "py": base64 of Python's dumps(), "php": base64 of PHP's own
//    serialize() of the same value, or null}
// and prints one JSON line per case:
//   unserialized  unserialize(py) succeeded (no false, no warning, no exception)
//   same_bytes    serialize(unserialize(py)) === py
//   reserialized  base64 of serialize(unserialize(py))
//   eq, identical unserialize(py) == / === unserialize(php) (null if no php
//                 bytes, "error: ..." if the comparison threw, e.g. on a cycle)
//   error         the warning or exception unserialize raised, if any
require __DIR__ . '/bootstrap.php';

set_error_handler(function (int $no, string $message) {
    throw new ErrorException($message, 0, $no);
});

function compare($a, $b, bool $strict)
{
    try {
        return $strict ? $a === $b : $a == $b;
    } catch (Throwable $e) {
        return 'error: ' . $e->getMessage();
    }
}

while (($line = fgets(STDIN)) !== false) {
    if (trim($line) === '') {
        continue;
    }
    $case = json_decode($line, true, 512, JSON_THROW_ON_ERROR);
    $py = base64_decode($case['py'], true);
    $row = ['name' => $case['name'], 'unserialized' => false, 'same_bytes' => false,
            'reserialized' => null, 'eq' => null, 'identical' => null, 'error' => null];
    try {
        $value = unserialize($py);
        if ($value === false && $py !== 'b:0;') {
            throw new RuntimeException('unserialize() returned false');
        }
        $row['unserialized'] = true;
        $again = serialize($value);
        $row['reserialized'] = base64_encode($again);
        $row['same_bytes'] = $again === $py;
        if (($case['php'] ?? null) !== null) {
            $theirs = unserialize(base64_decode($case['php'], true));
            $row['eq'] = compare($value, $theirs, false);
            $row['identical'] = compare($value, $theirs, true);
        }
    } catch (Throwable $e) {
        $row['error'] = get_class($e) . ': ' . $e->getMessage();
    }
    emit($row);
}
