<?php
// Common start of the test scripts: strict errors, optional Laravel autoload, classes.
error_reporting(E_ALL & ~E_DEPRECATED);
ini_set('display_errors', 'stderr');
ini_set('serialize_precision', '-1');
foreach (['/usr/share/php/Illuminate/autoload.php', '/usr/share/php/Carbon/autoload.php'] as $autoload) {
    if (is_file($autoload)) {
        require_once $autoload;
    }
}
require_once __DIR__ . '/classes.php';

function emit(array $row): void
{
    echo json_encode($row, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES), "\n";
}
