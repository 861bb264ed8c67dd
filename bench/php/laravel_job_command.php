<?php
/**
 * Prints serialize($job) for a realistic Laravel queued job: the exact bytes
 * Laravel stores in the queue payload's data.command.
 *
 *   php bench/php/laravel_job_command.php > bench/php/laravel_job_command.bin
 *
 * Uses Debian's Laravel 8.83 packages under /usr/share/php (php-laravel-framework).
 * The length goes to stderr so stdout is exactly the serialized bytes.
 */

declare(strict_types=1);

namespace App\Jobs;

require_once '/usr/share/php/Illuminate/autoload.php';

use Carbon\Carbon;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Queue\SerializesModels;

class SendInvoiceEmail implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public int $tries = 5;
    public int $timeout = 120;
    public array $backoff = [10, 60, 300];
    public bool $deleteWhenMissingModels = true;

    public function __construct(
        public int $invoiceId,
        public string $customerEmail,
        protected string $customerName,
        protected float $totalAmount,
        protected array $lineItems,
        private ?string $couponCode,
        private bool $sendCopyToAccounting,
        public ?Carbon $dueDate = null,
    ) {
    }

    public function handle(): void
    {
    }
}

$job = new SendInvoiceEmail(
    invoiceId: 48213,
    customerEmail: 'zoë.müller@example.de',
    customerName: 'Zoë Müller-Łukasiewicz',
    totalAmount: 1234.56,
    lineItems: [
        ['sku' => 'WID-001', 'name' => 'Widget “Pro” 2000', 'qty' => 3, 'unit_price' => 199.99, 'tax_rate' => 0.19],
        ['sku' => 'GAD-042', 'name' => 'Gadget — Deluxe', 'qty' => 1, 'unit_price' => 499.0, 'tax_rate' => 0.19],
        ['sku' => 'SRV-SUP', 'name' => 'Support (12 months)', 'qty' => 1, 'unit_price' => 135.59, 'tax_rate' => 0.0, 'meta' => ['renewal' => true, 'term' => 12]],
    ],
    couponCode: null,
    sendCopyToAccounting: true,
    dueDate: Carbon::create(2024, 7, 31, 23, 59, 59, 'Europe/Berlin'),
);
$job->onConnection('database')->onQueue('emails')->delay(90);

$bytes = serialize($job);
fwrite(STDOUT, $bytes);
fwrite(STDERR, strlen($bytes) . " bytes\n");
